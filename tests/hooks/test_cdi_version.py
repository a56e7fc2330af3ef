"""`cgpu cdi` writes the lowest cdiVersion that expresses its spec; `--cdi-version` pins it."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cgpu.hooks.cdi_version import VersionError, choose_version, minimum_version

CDI = [sys.executable, "-I", "-m", "cgpu.cli", "cdi", "--simulate", "--cgpu", "/usr/bin/cgpu"]

BARE: dict[str, Any] = {
    "cdiVersion": "",
    "kind": "cgpu.io/gpu-mem",
    "devices": [{"name": "all", "containerEdits": {"env": ["A=1"]}}],
    "containerEdits": {
        "mounts": [{"hostPath": "/a", "containerPath": "/b", "options": ["ro", "bind"]}],
        "hooks": [{"hookName": "createRuntime", "path": "/bin/true", "env": ["X=1"]}],
    },
}


def _with(path: str, value: Any) -> dict[str, Any]:
    """BARE with one field set; `path` is dotted, `devices.0` is the first device."""
    spec = copy.deepcopy(BARE)
    node: Any = spec
    *parents, last = path.split(".")
    for part in parents:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[last] = value
    return spec


def _cdi(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    out = tmp_path / "cdi.json"
    cmd = [*CDI, "--output", str(out), "--state-dir", str(tmp_path / "state"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("spec", "version"),
    [
        (BARE, "0.3.0"),  # env, mounts, hooks with env: all in the earliest version
        (_with("containerEdits.mounts", [{"hostPath": "/a", "containerPath": "/b",
                                           "type": "bind"}]), "0.4.0"),
        (_with("devices.0.name", "0"), "0.5.0"),
        (_with("devices.0.containerEdits.deviceNodes", [{"path": "/dev/x",
                                                          "hostPath": "/dev/y"}]), "0.5.0"),
        (_with("annotations", {"a": "b"}), "0.6.0"),
        (_with("devices.0.annotations", {"a": "b"}), "0.6.0"),
        (_with("kind", "cgpu.io/gpu.mem"), "0.6.0"),
        (_with("containerEdits.additionalGids", [5]), "0.7.0"),
        (_with("devices.0.containerEdits.intelRdt", {"closID": "c"}), "0.7.0"),
        (_with("containerEdits.intelRdt", {"schemata": ["L3:0=f"]}), "1.1.0"),
        (_with("devices.0.containerEdits.netDevices", [{"hostInterfaceName": "e",
                                                         "name": "e"}]), "1.1.0"),
    ],
)  # fmt: skip
def test_minimum_version_follows_the_cdi_rules(spec: dict[str, Any], version: str) -> None:
    assert minimum_version(spec)[0] == version


def test_a_pinned_version_below_the_minimum_is_refused() -> None:
    spec = _with("devices.0.name", "0")
    assert choose_version(spec, "0.6.0") == "0.6.0"
    assert choose_version(spec, "v0.5.0") == "0.5.0"
    with pytest.raises(VersionError, match=r"0\.4\.0 is too low .*'0'.* needs 0\.5\.0"):
        choose_version(spec, "0.4.0")
    with pytest.raises(VersionError, match=r"unknown CDI version '0\.9\.0'"):
        choose_version(spec, "0.9.0")


def test_cgpu_cdi_writes_the_lowest_version(tmp_path: Path) -> None:
    result = _cdi(tmp_path)
    assert result.returncode == 0, result.stderr
    spec = json.loads((tmp_path / "cdi.json").read_text())
    # Device "0" starts with a digit: 0.5.0, which podman 4.3 (Debian bookworm) still knows.
    assert spec["cdiVersion"] == "0.5.0"
    assert [d["name"] for d in spec["devices"]][:2] == ["all", "0"]
    hooks = spec["containerEdits"]["hooks"]
    assert all(h["args"][-1] == "--simulate" for h in hooks)


def test_cgpu_cdi_version_flag(tmp_path: Path) -> None:
    result = _cdi(tmp_path, "--cdi-version", "0.6.0")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "cdi.json").read_text())["cdiVersion"] == "0.6.0"
    (tmp_path / "cdi.json").unlink()
    result = _cdi(tmp_path, "--cdi-version", "0.4.0")
    assert result.returncode == 2
    assert "0.4.0 is too low for this spec" in result.stderr and "needs 0.5.0" in result.stderr
    assert not (tmp_path / "cdi.json").exists()
    result = _cdi(tmp_path, "--cdi-version", "latest")
    assert result.returncode == 2 and "unknown CDI version 'latest'" in result.stderr
