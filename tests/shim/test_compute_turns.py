"""Every container on a gated GPU takes turns (issue 35): a container without a compute limit, on
a GPU where a neighbour has one, is best effort under the arbiter. It gets what the limited ones
leave, and its demand is known the moment it has work (it asks, as they do), so no ceiling
remains beside it and no second is lost to NVML's lag.

Containers are ledger directories with the host's cgpu.conf; those without a compute line still
have one (a memory slice), as the device plugin writes it. NVML is as coarse as an H100's. Shares
are the simulator's exact kernel time per process, in 1 s windows from the second one. The goals
are +- 5 points (benchmarks/compute_share.py --cases turns measures them); the bounds here keep
one point of margin for a loaded 2-core CI machine.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from compute_kit import Arbiter, build_load, one_second_windows, pidns_works, run_isolated

from cgpu.compute.sampler import CONFIRM_GAP
from cgpu.core.config import write_config

MS = 1_000_000
SECONDS = 11.0
SANITIZED = bool(os.environ.get("CGPU_TEST_SANITIZER"))
TOL = 6


@pytest.fixture(scope="module")
def load(tmp_path_factory: pytest.TempPathFactory, cc: str, sim_dir: Path) -> Path:
    return build_load(cc, sim_dir, tmp_path_factory.mktemp("compute_load"))


def _container(name: str, device: int, conf: tuple[int, str] | None, **extra: object) -> dict:
    """One container of one process of 1 ms kernels; without `conf`, best effort (the host's
    cgpu.conf has no compute line)."""
    return {
        "name": name,
        "env": {},
        "conf": list(conf) if conf else None,
        "hosted": conf is None,
        "processes": 1,
        "kernel_ns": MS,
        "seconds": SECONDS + 0.5,
        "device": device,
        **extra,
    }


def _spec(shim_env, sim_dir: Path, load: Path, root: Path, devices: int, containers) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    env = shim_env(devices=devices)
    env.pop("CGPU_LEDGER_DIR")
    env["CGPU_SIM_STATE"] = str(root / "sim.state")
    assert "CGPU_SIM_UTIL_ATTRIBUTION" not in env  # the default: NVML as coarse as an H100's
    for c in containers:
        c["ledger"] = str(root / "containers" / c["name"])
    return {
        "sim_dir": str(sim_dir),
        "state": env["CGPU_SIM_STATE"],
        "load": str(load),
        "env": env,
        "containers": containers,
        "windows": one_second_windows(0.0, SECONDS),
        "arbiter": [],
    }


def _shares(windows: list[dict[str, float]], name: str) -> list[float]:
    return [round(w[name], 1) for w in windows]


@pytest.mark.skipif(SANITIZED, reason="timing: outside the sanitizer builds")
def test_limits_hold_beside_best_effort_neighbours(shim_env, sim_dir, load, tmp_path):
    # One machine, a case per GPU:
    # 0: fixed 60 beside a saturating container without a limit (before: 48.8, the ceiling);
    # 1: fixed 30 beside two of them, which split the rest evenly;
    # 2: fixed 20 + share 40 + one without a limit, which gets what is left;
    # 3: fixed 30 beside one that saturates and idles by turns of 1.5 s.
    containers = [
        _container("f60", 0, (60, "fixed")),
        _container("be0", 0, None),
        _container("f30", 1, (30, "fixed")),
        _container("be1a", 1, None),
        _container("be1b", 1, None),
        _container("f20", 2, (20, "fixed")),
        _container("s40", 2, (40, "share")),
        _container("be2", 2, None),
        _container("f30c", 3, (30, "fixed")),
        _container("be3", 3, None, cycle=1.5),
    ]
    spec = _spec(shim_env, sim_dir, load, tmp_path, 4, containers)
    result = run_isolated(spec)[1:-1]  # from the second window; the last one ends with the loads
    f60, be0 = _shares(result, "f60"), _shares(result, "be0")
    assert all(abs(v - 60) <= TOL for v in f60), f60
    assert all(v >= 35 - 1 for v in be0), be0
    f30, a, b = (_shares(result, n) for n in ("f30", "be1a", "be1b"))
    assert all(abs(v - 30) <= TOL for v in f30), f30
    assert all(abs(x - y) <= 5 + 1 for x, y in zip(a, b, strict=True)), (a, b)
    assert all(x + y >= 70 - 2 * TOL for x, y in zip(a, b, strict=True)), (a, b)
    f20, s40, be2 = (_shares(result, n) for n in ("f20", "s40", "be2"))
    assert all(abs(v - 20) <= TOL for v in f20), f20
    assert all(v >= 35 - 1 for v in s40), s40
    busy = [x + y + z for x, y, z in zip(f20, s40, be2, strict=True)]
    assert min(busy) >= 90, busy  # what the limited ones leave is used
    f30c = _shares(result, "f30c")
    assert all(abs(v - 30) <= TOL for v in f30c), f30c


GPU = "GPU-5eed0000-0000-4000-8000-000000000000"  # the simulator's default for GPU 0
ELSEWHERE = "GPU-99999999-9999-9999-9999-999999999999"


def _lookup(load: Path, env: dict[str, str], ledger: Path) -> list[str]:
    """What a new process of the container is handed for each launch entry point, through
    dlsym and cuGetProcAddress: "driver" (its own function) or "shim" (the gated one)."""
    out = subprocess.run(
        [str(load), "lookup"],
        env={**env, "CGPU_LEDGER_DIR": str(ledger), "CUDA_VISIBLE_DEVICES": "0"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [word.split("=")[1] for line in out.splitlines() for word in line.split()[1:]]


def test_launches_are_hooked_only_on_a_gated_gpu(shim_env, load, tmp_path):
    # A container without a limit on a GPU where nobody has one: the arbiter makes no socket
    # for it, and the shim hands out the driver's own launch functions (nothing added). A
    # neighbour with a limit arrives: the GPU is gated, the container gets a socket, and a
    # process it starts from then on is handed the gated functions.
    env = shim_env(devices=1)
    env.pop("CGPU_LEDGER_DIR")
    env["CGPU_SIM_STATE"] = str(tmp_path / "sim.state")
    root = tmp_path / "containers"
    plain, gated, limited = root / "plain", root / "gated", root / "limited"
    for directory in (plain, gated, limited):
        directory.mkdir(parents=True)
    write_config(plain, {GPU: 8 << 30}, {})
    write_config(gated, {ELSEWHERE: 8 << 30}, {ELSEWHERE: (30, "fixed")})
    arbiter = Arbiter(root, env, [])
    try:
        arbiter.wait_for([gated])
        assert not (plain / "compute.sock").exists()
        before = _lookup(load, env, plain)
        assert before and set(before) == {"driver"}, before
        write_config(limited, {GPU: 8 << 30}, {GPU: (30, "fixed")})
        arbiter.wait_for([limited, plain])
        after = _lookup(load, env, plain)
        assert after and set(after) == {"shim"}, after
    finally:
        arbiter.stop()


@pytest.mark.skipif(SANITIZED, reason="timing: outside the sanitizer builds")
def test_two_best_effort_containers_keep_the_gpu_busy_beside_an_idle_limited_process(
    shim_env, sim_dir, load, tmp_path
):
    # The limited container's process holds a context and launches nothing. Its shim connects
    # when the context is made: the arbiter counts it as its container's, idle, and leaves the
    # GPU to the two best-effort ones. Unconnected it was a process outside the containers,
    # probed for about once a second: the GPU 94% busy.
    containers = [
        _container("f30", 0, (30, "fixed"), idle_first=SECONDS + 1),
        _container("a", 0, None),
        _container("b", 0, None),
    ]
    spec = _spec(shim_env, sim_dir, load, tmp_path, 1, containers)
    status = tmp_path / "status.json"
    spec["arbiter"] = ["--status", str(status)]
    result = run_isolated(spec)[1:-1]
    a, b = _shares(result, "a"), _shares(result, "b")
    (gpu,) = json.loads(status.read_text())["gpus"].values()
    busy = [x + y for x, y in zip(a, b, strict=True)]
    # Before: 9 probes in 12.5 s. One may still come while the process starts (it is seen by
    # NVML before its shim has said hello), or when a follower's out-of-turn score reaches
    # SUSPECT_AT by chance (CI at 22cc2e1: one window 93.4, one probe). Each leaves the token
    # free for CONFIRM_GAP of a ~1/6 s NVML period: 5 points of one window, or split over two.
    assert gpu["probes"] <= 2, gpu
    probe_points = 100 * CONFIRM_GAP / 6 + 0.5
    short = sum(max(0.0, 95 - 1 - x) for x in busy)
    assert short <= gpu["probes"] * probe_points, (busy, gpu["probes"])
    assert all(abs(x - y) <= 5 + 1 for x, y in zip(a, b, strict=True)), (a, b)


@pytest.mark.skipif(SANITIZED, reason="timing: outside the sanitizer builds")
@pytest.mark.skipif(
    not pidns_works(), reason="needs unshare --pid (its processes are placed by it)"
)
def test_a_process_that_started_unhooked_is_brought_into_the_turns(
    shim_env, sim_dir, load, tmp_path
):
    # A container without a limit starts saturating before its GPU is gated (the arbiter comes
    # 2 s later, as after a node's restart or when a limited neighbour arrives): its process was
    # handed the driver's own launch functions. The arbiter gives it turns from the host
    # (stopped outside them, cgpu/compute/unhooked.py): fixed 60 beside it holds, where before it
    # got the ceiling (about half); the neighbour keeps the rest.
    containers = [
        _container("f60", 0, (60, "fixed")),
        _container("early", 0, None, pidns=True, meta=True, env={"COMPUTE_LOAD_SYNC_EVERY": "5"}),
    ]
    spec = _spec(shim_env, sim_dir, load, tmp_path, 1, containers)
    spec["arbiter_after"] = 2.0
    status = tmp_path / "status.json"
    spec["arbiter"] = ["--status", str(status)]
    result = run_isolated(spec)[4:-1]  # from 2 s after the arbiter's start
    f60, early = _shares(result, "f60"), _shares(result, "early")
    seen = json.loads(status.read_text())["gpus"]
    assert all(abs(v - 60) <= TOL for v in f60), (f60, seen)
    # The cost of the host's lever: each stop holds the token a quarter of a quantum for what
    # the process had queued, idle when it had less (60 + 36-37 of the GPU's time, windows of
    # 31.5-39.5 for it in three runs on 2026-12-02).
    assert all(v >= 30 - 1 for v in early), early


@pytest.mark.skipif(SANITIZED, reason="timing: outside the sanitizer builds")
def test_fixed_holds_beside_work_conserving_neighbours_with_long_kernels(
    shim_env, sim_dir, load, tmp_path
):
    # Kernels longer than the quantum: a running one cannot be taken back, so a `fixed`
    # container is served by what it is told it may queue and by when it may come back. Before:
    # fixed 60 beside a best-effort container of 50 ms kernels got 33, fixed 20 beside share 40
    # got 10, fixed 20 beside share 80 of 200 ms kernels 0-20 by turns.
    containers = [
        _container("f60", 0, (60, "fixed"), kernel_ns=50 * MS),
        _container("be", 0, None, kernel_ns=50 * MS),
        _container("f20", 1, (20, "fixed"), kernel_ns=50 * MS),
        _container("s40", 1, (40, "share"), kernel_ns=50 * MS),
        _container("be1", 1, None, kernel_ns=50 * MS),
        _container("f20long", 2, (20, "fixed"), kernel_ns=200 * MS),
        _container("s80", 2, (80, "share"), kernel_ns=200 * MS),
    ]
    spec = _spec(shim_env, sim_dir, load, tmp_path, 3, containers)
    result = run_isolated(spec)[1:-1]
    # Kernels past the quantum are judged over 5 s windows (issue 35's rule): a 200 ms kernel
    # that starts just after a 1 s window's end moves a fifth of the GPU into the next one.
    def fives(name: str) -> list[float]:  # windows 1-5 and 5-9
        got = _shares(result, name)
        return [sum(got[:5]) / 5, sum(got[-5:]) / 5]

    for name, target in (("f60", 60), ("f20", 20)):
        assert all(abs(v - target) <= TOL for v in fives(name)), (name, _shares(result, name))
    # 200 ms kernels, ten quanta each, over the whole run: one kernel in a second is its 20, and
    # about one run in eight a kernel is put off by a second in the first five (a REVOKE's
    # deadline passes before the neighbour's running kernel ends, and the GPU time-slices the
    # two while the new holder's turn is charged).
    long = _shares(result, "f20long")
    assert abs(sum(long) / len(long) - 20) <= TOL, long
    for name in ("be", "s40"):
        assert all(v >= 35 - 1 for v in fives(name)), (name, _shares(result, name))


@pytest.mark.skipif(SANITIZED, reason="timing: outside the sanitizer builds")
def test_a_trainer_keeps_what_a_saturating_high_fixed_container_leaves(
    shim_env, sim_dir, load, tmp_path
):
    # A `high` `fixed` 25 container that never idles beside a `low` `share` 75 trainer, 500 us
    # kernels on one GPU and 5 ms kernels on another. The `high` one cannot take the GPU before
    # its credit is back: until its turn nears, the trainer's grants are the usual ones. Before,
    # every grant beside it was a millisecond's work, and each renewal's round trip idled the
    # GPU: the trainer got 15-55 of the 75 left (benchmarks/results/2026-12-03-unseen/).
    containers = [
        _container("hi", 0, (25, "fixed", "high"), kernel_ns=500_000),
        _container("lo", 0, (75, "share", "low"), kernel_ns=500_000),
        _container("hi5", 1, (25, "fixed", "high"), kernel_ns=5 * MS),
        _container("lo5", 1, (75, "share", "low"), kernel_ns=5 * MS),
    ]
    spec = _spec(shim_env, sim_dir, load, tmp_path, 2, containers)
    result = run_isolated(spec)[1:-1]
    for high, low in (("hi", "lo"), ("hi5", "lo5")):
        got_high, got_low = _shares(result, high), _shares(result, low)
        mean = sum(got_high) / len(got_high)
        # the reservation (a window may lose a probe's 5 points: one allowed past TOL)
        assert abs(mean - 25) <= TOL / 2 and sum(abs(v - 25) > TOL for v in got_high) <= 1, (
            high,
            got_high,
        )
        assert all(v <= 25 + TOL for v in got_high), (high, got_high)  # never over its limit
        # the trainer keeps >= 80% of what the high one leaves, in every window but one
        kept = [lo / max(1.0, 100 - hi) for hi, lo in zip(got_high, got_low, strict=True)]
        assert sum(k < 0.8 for k in kept) <= 1 and min(kept) >= 0.7, (low, got_low, got_high)
