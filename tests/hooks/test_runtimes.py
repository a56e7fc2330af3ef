"""The files other runtimes read: the hooks.d entry (podman, CRI-O) and the CDI spec."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hook_runc import CHUNK, SIM_ENV, Bundle, hook_env, parse_probe, probe_script

from cgpu.cli import main as cgpu_main
from cgpu.core.containers import containers_root

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "hooks"
RUNNABLE = [sys.executable, "-I", "-m", "cgpu.cli"]  # this checkout's cgpu, in place of its path


def _runnable(hook: dict[str, Any], sim_dir: Path) -> dict[str, Any]:
    """`hook` as a runtime would run it, with the path swapped for this interpreter."""
    assert hook["path"] == "/usr/local/bin/cgpu" and hook["args"][0] == "cgpu"
    args = [*RUNNABLE, *hook["args"][1:]]
    return {**hook, "path": sys.executable, "args": args, "env": hook_env(sim_dir)}


def test_hook_install_writes_the_deployed_hooks_d_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["hook", "install", "--dir", str(tmp_path), "--cgpu", "/usr/local/bin/cgpu"]
    assert cgpu_main([*argv, "--state-dir", "/var/lib/cgpu"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "cgpu.json")
    written = json.loads((tmp_path / "cgpu.json").read_text())
    assert written == json.loads((DEPLOY / "cgpu.json").read_text())
    assert written["version"] == "1.0.0" and written["stages"] == ["createRuntime", "poststop"]
    assert cgpu_main([*argv, "--stage", "prestart"]) == 0
    assert json.loads((tmp_path / "cgpu.json").read_text())["stages"] == ["prestart", "poststop"]


def test_hooks_d_entry_limits_and_cleans_up(
    make_bundle: Callable[..., Bundle], state_dir: Path, sim_dir: Path, tmp_path: Path
) -> None:
    argv = ["hook", "install", "--dir", str(tmp_path), "--cgpu", "/usr/local/bin/cgpu"]
    assert cgpu_main([*argv, "--state-dir", str(state_dir)]) == 0
    entry = json.loads((tmp_path / "cgpu.json").read_text())
    env = {"CGPU_MEM_LIMIT": "160MiB"}
    bundle = make_bundle(probe_script("init", "fill", str(CHUNK), "info"), env, stage=None)
    assert entry["when"] == {"always": True}  # as podman applies it: every stage listed
    bundle.config["hooks"] = {s: [_runnable(entry["hook"], sim_dir)] for s in entry["stages"]}
    result = bundle.run()
    assert result.returncode == 0, result.stderr
    out = parse_probe(result.stdout)
    assert (int(out["fill"][0]) * CHUNK, int(out["info"][2])) == (160 << 20, 160 << 20)
    assert list(containers_root(state_dir).iterdir()) == []  # poststop, told by the status


def _cdi_spec(state_dir: Path, sim_dir: Path, output: Path) -> dict[str, Any]:
    env = {**os.environ, **dict(e.split("=", 1) for e in hook_env(sim_dir))}
    cmd = [*RUNNABLE, "cdi", "--output", str(output), "--state-dir", str(state_dir)]
    result = subprocess.run(
        [*cmd, "--cgpu", "/usr/local/bin/cgpu"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return json.loads(output.read_text())


def _apply_cdi(bundle: Bundle, spec: dict[str, Any], device: str, sim_dir: Path) -> None:
    """Apply the spec's edits for `device` to the bundle, as a CDI-enabled runtime does."""
    edits = [spec["containerEdits"]] + [
        d["containerEdits"] for d in spec["devices"] if d["name"] == device
    ]
    process, config = bundle.config["process"], bundle.config
    for edit in edits:
        process["env"] += edit.get("env", [])
        for m in edit.get("mounts", []):
            config["mounts"].append(
                {"destination": m["containerPath"], "source": m["hostPath"], "type": "bind",
                 "options": m["options"]}
            )  # fmt: skip
        for hook in edit.get("hooks", []):
            runnable = {k: v for k, v in _runnable(hook, sim_dir).items() if k != "hookName"}
            config["hooks"].setdefault(hook["hookName"], []).append(runnable)


def test_cdi_spec_limits_the_device_it_names(
    make_bundle: Callable[..., Bundle], state_dir: Path, sim_dir: Path, tmp_path: Path
) -> None:
    spec = _cdi_spec(state_dir, sim_dir, tmp_path / "cdi" / "cgpu.json")
    assert (spec["cdiVersion"], spec["kind"]) == ("0.5.0", "cgpu.io/gpu-mem")
    uuids = [d["name"] for d in spec["devices"] if d["name"].startswith("GPU-")]
    assert [d["name"] for d in spec["devices"]] == ["all", "0", uuids[0], "1", uuids[1]]
    assert len(uuids) == int(SIM_ENV["CGPU_SIM_DEVICES"])
    # NVIDIA's own CDI spec sets NVIDIA_VISIBLE_DEVICES=void; the cgpu device still names GPU 0.
    # CUDA_VISIBLE_DEVICES stands in for NVIDIA's CDI device, which would expose GPU 0 only.
    env = {"CGPU_MEM_LIMIT": "192MiB", "NVIDIA_VISIBLE_DEVICES": "void",
           "CUDA_VISIBLE_DEVICES": uuids[0]}  # fmt: skip
    bundle = make_bundle(probe_script("init", "fill", str(CHUNK), "info"), env, stage=None)
    _apply_cdi(bundle, spec, "0", sim_dir)
    assert f"CGPU_CDI_DEVICE_0={uuids[0]}" in bundle.config["process"]["env"]
    result = bundle.run()
    assert result.returncode == 0, result.stderr
    out = parse_probe(result.stdout)
    assert out["preload"] == ["/usr/local/cgpu/libcgpu.so"]
    assert (int(out["fill"][0]) * CHUNK, int(out["info"][2])) == (192 << 20, 192 << 20)
    assert list(containers_root(state_dir).iterdir()) == []
