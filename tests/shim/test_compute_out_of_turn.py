"""Out-of-turn work under the arbiter, on the simulator with NVML as coarse as an H100's (one
process named per period, whole percent): launches through libcuda.so.1 opened by its absolute
path, past the shim's gate, from a connected process (path `mixed`: one thread gated, one not).

Shares are the simulator's exact kernel time; the arbiter's status file says who it flagged.
Timing: kept out of the sanitizer runs, as test_compute_limit.py's are.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from compute_kit import build_load, run_isolated

SANITIZED = bool(os.environ.get("CGPU_TEST_SANITIZER"))
SECONDS = 10.0
TOL = 6

pytestmark = pytest.mark.skipif(SANITIZED, reason="timing: outside the sanitizer builds")


@pytest.fixture(scope="module")
def load(tmp_path_factory: pytest.TempPathFactory, cc: str, sim_dir: Path) -> Path:
    return build_load(cc, sim_dir, tmp_path_factory.mktemp("compute_load"))


def _run(shim_env, sim_dir, load, root: Path, containers, windows, extra: list[str]):
    root.mkdir(parents=True, exist_ok=True)
    env = shim_env(devices=1)
    env.pop("CGPU_LEDGER_DIR")
    env["CGPU_SIM_STATE"] = str(root / "sim.state")
    env["CGPU_TEST_RAW_LIBCUDA"] = str(sim_dir / "libcuda.so.1")
    for c in containers:
        c["ledger"] = str(root / "containers" / c["name"])
    status = root / "status.json"
    spec = {
        "sim_dir": str(sim_dir),
        "state": env["CGPU_SIM_STATE"],
        "load": str(load),
        "env": env,
        "containers": containers,
        "windows": windows,
        "arbiter": ["--status", str(status), *extra],
    }
    return run_isolated(spec), status


def _container(name, conf, path="kernel", threads=1, **extra):
    return {
        "name": name,
        "env": {},
        "conf": list(conf) if conf else None,
        "processes": 1,
        "kernel_ns": 1_000_000,
        "seconds": SECONDS,
        "path": path,
        "threads": threads,
        **extra,
    }


def test_a_connected_process_launching_out_of_turn_is_flagged_charged_and_stopped(
    shim_env, sim_dir, load, tmp_path
):
    containers = [
        _container("off", (30, "fixed"), path="mixed", threads=2),
        _container("n", (30, "fixed")),
        _container("s", (40, "share")),
    ]
    # Flagged at 1.5-3.7 s on the simulator (the goal is 3 s; see docs/performance.md): the
    # neighbours are judged from 6 s on, the offender over the 5 s window from 4 s. Once
    # flagged, its processes are stopped at each REVOKE and its hold keeps the token a tail
    # after (what its ungated thread queued runs then, alone): before that tail, the neighbour
    # shared its turns with that work and got 19-26.
    ones = [(float(i), i + 1.0) for i in range(6, 9)]
    fives = [(4.0, 9.0)]
    shares, status = _run(shim_env, sim_dir, load, tmp_path, containers, ones + fives, [])
    doc = json.loads(status.read_text())
    (gpu,) = doc["gpus"].values()
    by_name = {Path(k).name: v for k, v in gpu["containers"].items()}
    assert gpu["host_view"] is True
    # (the flag itself ends with the offender's processes, before the file is read)
    assert by_name["off"]["out_of_turn_s"] > 0.2, by_name
    assert by_name["n"]["over_compute"] is False and by_name["s"]["over_compute"] is False
    assert by_name["n"]["out_of_turn_s"] == 0 and by_name["s"]["out_of_turn_s"] == 0
    for window in shares[: len(ones)]:
        assert window["n"] >= 30 - TOL, shares
    for window in shares[len(ones) :]:
        assert window["off"] <= 30 + 5 + 1, shares


def test_with_enforce_only_the_offender_is_killed(shim_env, sim_dir, load, tmp_path):
    containers = [
        _container("off", (30, "fixed"), path="mixed", threads=2, signals=[]),
        _container("n", (30, "fixed")),
        _container("s", (40, "share")),
    ]
    windows = [(6.0, 7.0), (7.0, 8.0)]
    with pytest.raises(AssertionError) as failed:
        _run(shim_env, sim_dir, load, tmp_path, containers, windows, ["--enforce"])
    # Only the offender's process ended by a signal (SIGKILL: rc -9).
    text = str(failed.value)
    assert "off pid" in text and "rc -9" in text, text[-2000:]
    assert "n pid" not in text and "s pid" not in text, text[-2000:]


def test_a_follower_beside_an_unmanaged_saturating_process_is_never_flagged(
    shim_env, sim_dir, load, tmp_path
):
    containers = [
        _container("a", (30, "fixed")),
        _container("b", (40, "share")),
        _container("u", None),
    ]
    windows = [(2.0, 9.0)]
    shares, status = _run(shim_env, sim_dir, load, tmp_path, containers, windows, [])
    doc = json.loads(status.read_text())
    (gpu,) = doc["gpus"].values()
    for name, figures in gpu["containers"].items():
        assert figures["over_compute"] is False, (name, figures)
        assert figures["out_of_turn_s"] == 0, (name, figures)
        assert figures["host_percent"] > 5, (name, figures)
    assert shares[0]["a"] > 10 and shares[0]["u"] > 15, shares
