"""An upgrade: a container started under the previous release while this release's host runs.

The previous release's shim is built from its commit (tests/releases.py, PREVIOUS_COMMIT)
with `git archive` and cmake, and cached under build/upgrade-<commit>/. A process under it holds
memory on the simulator in a container directory laid out as that release's hook leaves it; then
this release's `cgpu ledger`, exporter collector, shim (a new process of the same container) and
the hook's clean-up must see it, account it, and get its memory back when it ends.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import releases
from releases import PREVIOUS, PREVIOUS_COMMIT, RELEASES, REPO

from cgpu.core.layout import CONFIG_NAME, LEDGER_NAME, META_NAME, SOURCE_HOOK
from cgpu.core.ledger import read_ledger
from cgpu.core.procfs import start_time
from cgpu.exporter.collector import CgpuCollector
from cgpu.hooks import sweep

MiB = 1 << 20
GiB = 1 << 30
UUID = "GPU-5eed0000-0000-4000-8000-0000000000a1"


def _run(command: list[str]) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(command, capture_output=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


@pytest.fixture(scope="session")
def previous_shim() -> Path:
    """libcgpu.so of the previous release, built from its commit (cached)."""
    return releases.previous_shim()


def _probe(native_build: Path, env: dict[str, str], *commands: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(native_build / "cuda_probe"), "dlsym", *map(str, commands)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _lines(proc: subprocess.Popen[str]) -> dict[str, list[list[str]]]:
    out, err = proc.communicate("", timeout=60)
    assert proc.returncode == 0, err
    found: dict[str, list[list[str]]] = {}
    for line in out.splitlines():
        name, *rest = line.split()
        found.setdefault(name, []).append(rest)
    return found


def _cgpu_ledger(container: Path) -> dict[str, object]:
    out = _run([sys.executable, "-P", "-m", "cgpu.cli", "ledger", "--json", str(container)])
    (record,) = json.loads(out.stdout)
    return record


def _exported_used(state_dir: Path, uuid: str) -> list[float]:
    """cgpu_container_gpu_memory_used_bytes of `uuid` in one collection of the exporter."""
    return [
        sample.value
        for family in CgpuCollector(state_dir).collect()
        for sample in family.samples
        if sample.name == "cgpu_container_gpu_memory_used_bytes"
        and sample.labels.get("gpu_uuid") == uuid
    ]


@pytest.mark.parametrize("ending", ["exit", "sigkill"])
def test_a_container_of_the_previous_release_stays_in_view_and_is_freed(
    ending: str,
    previous_shim: Path,
    shim: Path,
    sim_env: Callable[..., dict[str, str]],
    native_build: Path,
    state_dir: Path,
) -> None:
    key = "upgrade-c1"
    container = state_dir / "containers" / key
    container.mkdir(parents=True)
    base = sim_env(memory="16GiB", uuids=UUID)
    base["CGPU_LEDGER_DIR"] = str(container)
    # The container directory as the previous release's hook writes it before the container
    # starts (its shim creates the ledger at its first CUDA call).
    (container / CONFIG_NAME).write_text(
        f"# cgpu container config\nversion 1\ndevice {UUID} {GiB}\n"
    )

    # The previous release's shim: a process that holds 600 MiB of the 1 GiB slice.
    old = _probe(
        native_build, {**base, "LD_PRELOAD": str(previous_shim)}, "init", "alloc", 600 * MiB,
        "ready", "wait",
    )  # fmt: skip
    assert old.stdout is not None
    assert [old.stdout.readline().split() for _ in range(3)] == [
        ["init", "0"],
        ["alloc", "0"],
        ["ready"],
    ]
    meta = {
        "key": key,
        "source": SOURCE_HOOK,
        "init_pid": old.pid,
        "init_start_time": start_time(old.pid),
    }
    (container / META_NAME).write_text(json.dumps(meta))

    try:
        # This release's readers: the ledger, `cgpu ledger`, the exporter.
        snap = read_ledger(container / LEDGER_NAME)
        assert snap.layout == RELEASES[PREVIOUS].ledger_writes
        (device,) = snap.devices
        assert (device.limit, device.used, device.processes) == (GiB, 600 * MiB, 1)
        assert [(p.pid, p.used) for p in snap.processes] == [(old.pid, {device.uuid: 600 * MiB})]
        shown = _cgpu_ledger(container)
        assert shown["layout"] == snap.layout
        assert [d["used"] for d in shown["devices"]] == [600 * MiB]  # type: ignore[index]
        assert _exported_used(state_dir, device.uuid) == [600 * MiB]

        # This release's shim in the same container counts what the old process holds.
        new_env = {**base, "LD_PRELOAD": str(shim)}
        seen = _lines(
            _probe(native_build, new_env, "init", "info", "alloc", 600 * MiB, "alloc", 300 * MiB)
        )
        assert seen["info"] == [["0", str(GiB - 600 * MiB), str(GiB)]]
        assert [a[0] for a in seen["alloc"]] == ["2", "0"]  # 2: out of memory

        # The hook's clean-up keeps a container whose init process runs.
        assert sweep.sweep(state_dir) == []
    finally:
        if ending == "sigkill":
            old.kill()
        old.communicate("", timeout=60)
    assert old.returncode == (-9 if ending == "sigkill" else 0)

    # Its memory returns: the readers count live processes only, and the new shim gets it all.
    snap = read_ledger(container / LEDGER_NAME)
    assert (snap.devices[0].used, snap.processes) == (0, [])
    assert _exported_used(state_dir, snap.devices[0].uuid) == [0]
    after = _lines(
        _probe(native_build, {**base, "LD_PRELOAD": str(shim)}, "init", "alloc", 900 * MiB)
    )
    assert after["alloc"] == [["0"]]
    assert sweep.sweep(state_dir) == [key]
    assert not container.exists()


def test_the_previous_release_is_built_from_its_own_commit(previous_shim: Path) -> None:
    """The cached build is of PREVIOUS_COMMIT's sources, not of this checkout's."""
    source = releases.previous_source()
    header = _run(["git", "-C", str(REPO), "show", f"{PREVIOUS_COMMIT}:native/shim/ledger.h"])
    assert (source / "native" / "shim" / "ledger.h").read_bytes() == header.stdout
