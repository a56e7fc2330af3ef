"""An upgrade with a real container: the previous release's hook and shim start it, this release
takes over the host while it runs.

The previous release is installed from its commit (tests/releases.py: `git archive`, then
`pip install --target`, cached under build/upgrade-<commit>/). Its `cgpu hook` runs at
createRuntime and injects its own shim; this release's `cgpu hook poststop` runs at the end, as
after an upgrade of the node's `cgpu` while the container ran.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import releases
from hook_runc import SIM_ENV, Bundle, hook_entry, hook_env, parse_probe, probe_script
from releases import PREVIOUS, RELEASES

from cgpu.core.containers import containers_root, read_meta
from cgpu.core.layout import LEDGER_NAME, SOURCE_HOOK
from cgpu.core.ledger import read_ledger
from cgpu.exporter.collector import CgpuCollector
from cgpu.hooks import sweep

MiB = 1 << 20
ONE_GPU = {"CGPU_MEM_LIMIT": "128MiB", "NVIDIA_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "0"}


@pytest.fixture(scope="session")
def previous_site() -> Path:
    """The previous release's `cgpu` package, installed from its commit (cached)."""
    return releases.previous_package()


def _exported_used(state_dir: Path) -> list[float]:
    return [
        sample.value
        for family in CgpuCollector(state_dir).collect()
        for sample in family.samples
        if sample.name == "cgpu_container_gpu_memory_used_bytes"
    ]


def _host_process(
    native_build: Path, sim_dir: Path, shim: Path, container: Path, *commands: object
) -> dict[str, list[str]]:
    """A process of this release's shim on the host, charging the container's ledger."""
    env = {
        "PATH": "/usr/bin:/bin",
        "LD_LIBRARY_PATH": str(sim_dir),
        "LD_PRELOAD": str(shim),
        "CGPU_LEDGER_DIR": str(container),
        "CUDA_VISIBLE_DEVICES": "0",
        **SIM_ENV,
    }
    done = subprocess.run(
        [str(native_build / "cuda_probe"), "dlsym", *map(str, commands)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return parse_probe(done.stdout)


def test_a_container_of_the_previous_release_is_seen_charged_and_cleaned_up(
    make_bundle: Callable[..., Bundle],
    state_dir: Path,
    sim_dir: Path,
    shim: Path,
    native_build: Path,
    previous_site: Path,
) -> None:
    bundle = make_bundle(
        probe_script("init", "alloc", str(96 * MiB), "ready", "wait"), ONE_GPU, None
    )
    old_cgpu = releases.previous_cgpu(previous_site)
    old_hook = {
        "path": sys.executable,
        "args": [*old_cgpu, "hook", "--state-dir", str(state_dir)],
        "env": hook_env(sim_dir),
        "timeout": 60,
    }
    bundle.config["hooks"] = {
        "createRuntime": [old_hook],
        "poststop": [hook_entry(state_dir, sim_dir, "poststop")],  # this release's
    }
    proc = bundle.start()
    container = containers_root(state_dir) / bundle.id
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while not lines or lines[-1] != "ready":
            line = proc.stdout.readline()
            assert line, f"the container ended early: {lines} {proc.stderr and proc.stderr.read()}"
            lines.append(line.strip())
        out = parse_probe("\n".join(lines))
        assert (out["init"], out["alloc"]) == (["0"], ["0"])
        assert out["preload"][0].endswith("libcgpu.so")  # the old hook injected its shim
        assert read_meta(container)["source"] == SOURCE_HOOK

        # This release's readers.
        snap = read_ledger(container / LEDGER_NAME)
        assert snap.layout == RELEASES[PREVIOUS].ledger_writes
        (device,) = snap.devices
        assert (device.limit, device.used, device.processes, len(snap.processes)) == (
            128 * MiB,
            96 * MiB,
            1,
            1,
        )
        assert _exported_used(state_dir) == [96 * MiB]
        listed = subprocess.run(
            [sys.executable, "-P", "-m", "cgpu.cli", "ledger", "--json", str(container)],
            capture_output=True,
            text=True,
            check=True,
        )
        assert [d["used"] for d in json.loads(listed.stdout)[0]["devices"]] == [96 * MiB]

        # This release's shim, in the same ledger, holds the container to the rest of its slice.
        seen = _host_process(
            native_build, sim_dir, shim, container, "init", "info", "alloc", 64 * MiB
        )
        assert (seen["info"], seen["alloc"]) == (["0", str(32 * MiB), str(128 * MiB)], ["2"])
        rest = _host_process(native_build, sim_dir, shim, container, "init", "alloc", 32 * MiB)
        assert rest["alloc"] == ["0"]
        assert sweep.sweep(state_dir) == []  # its init process runs
    finally:
        _, err = proc.communicate("", timeout=60)
    assert proc.returncode == 0, err
    assert not container.exists()  # this release's poststop removed the old one's directory
