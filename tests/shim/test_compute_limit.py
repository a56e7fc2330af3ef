"""The compute limit (contract: "Compute share") on the simulator's shared kernel timeline.

Shares are read from the simulator's NVML per-process utilization (compute_kit.py), which the
simulator computes from its own timeline: independent of the shim's bookkeeping.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from compute_kit import build_load, one_second_windows, run_isolated

from cgpu.core.config import ConfigError, load_compute, load_config, render_config, write_config
from cgpu.core.ledger import read_ledger

MS = 1_000_000
UUID = "GPU-11111111-2222-3333-4444-555555555555"
SANITIZED = bool(os.environ.get("CGPU_TEST_SANITIZER"))


@pytest.fixture(scope="session")
def load(tmp_path_factory: pytest.TempPathFactory, cc: str, sim_dir: Path) -> Path:
    return build_load(cc, sim_dir, tmp_path_factory.mktemp("compute_load"))


def _spec(
    shim_env,
    sim_dir: Path,
    load: Path,
    tmp_path: Path,
    devices: int,
    containers,
    windows,
    state: str = "sim.state",
    **sim: object,
):
    env = shim_env(devices=devices, **sim)
    env.pop("CGPU_LEDGER_DIR")
    env["CGPU_SIM_STATE"] = str(tmp_path / state)
    for c in containers:
        c["ledger"] = str(tmp_path / "ledgers" / c["name"])
    return {
        "sim_dir": str(sim_dir),
        "state": env["CGPU_SIM_STATE"],
        "load": str(load),
        "env": env,
        "containers": containers,
        "windows": windows,
    }


def _limit(percent: int, policy: str = "fixed") -> dict[str, str]:
    return {"CGPU_COMPUTE_LIMIT": str(percent), "CGPU_COMPUTE_POLICY": policy}


# ---- accuracy ----------------------------------------------------------------------------

SMALL, LARGE = 10_000, 50 * MS
SECONDS = 12.0


def _fixed(n: int, kernel_ns: int, device: int, **extra) -> dict:
    return {
        "name": f"fixed-{n}x{kernel_ns}" + ("-streams" if extra else ""),
        "env": _limit(30),
        "processes": n,
        "kernel_ns": kernel_ns,
        "seconds": SECONDS + 0.5,
        "device": device,
        **extra,
    }


def test_fixed_and_share_hold_their_targets_each_second(shim_env, sim_dir, load, tmp_path):
    # Two simulated machines of four GPUs run at once, one scenario per GPU, judged in 1 s
    # windows by the simulator's exact kernel time while the controllers see only NVML's
    # coarse samples (1/6 s, whole percent):
    # - `fixed` 30%, saturating, 1, 4 or 16 processes of 10 us or 50 ms kernels, and one
    #   process of 4 threads each on its own stream: 30 +- 6 in every window from 2 s;
    # - `share` 30% and 70% on one GPU: 30 / 70 +- 6 while both run; the 70% one stops at 5 s
    #   and the 30% one has >= 85% in [7, 8); a new 70% one arrives at 8 s and from [10, 11)
    #   they are back at 30 / 70 +- 6.
    # (The promise is +- 5 and >= 90 within 2 s: benchmarks/compute_share.py measures it; the
    # margin here is for a loaded 2-core CI machine.)
    # NVML here gives each process its own busy % per period (CGPU_SIM_UTIL_ATTRIBUTION=exact).
    # A real H100 names one process per period when several ran (the simulator's default):
    # there this controller (no arbiter) holds the targets for containers alone, not for a pair;
    # the arbiter does (test_compute_arbiter.py).
    counts = (1, 4) if SANITIZED else (1, 4, 16)
    share = {"env": _limit(30, "share"), "processes": 2, "kernel_ns": 200_000, "device": 3}
    machines = [
        [
            *(_fixed(n, SMALL, i) for i, n in enumerate(counts)),
            _fixed(1, 200_000, 3, threads=4, path="kernel_ptsz"),
        ],
        [
            *(_fixed(n, LARGE, i) for i, n in enumerate(counts)),
            {**share, "name": "share-30", "seconds": SECONDS + 0.5},
            {**share, "name": "share-70", "env": _limit(70, "share"), "seconds": 5.0},
            {
                **share,
                "name": "share-70-back",
                "env": _limit(70, "share"),
                "seconds": SECONDS - 7.5,
                "start_after": 8.0,
            },
        ],
    ]
    windows = one_second_windows(0.0, SECONDS)
    specs = [
        _spec(
            shim_env, sim_dir, load, tmp_path, 4, cs, windows, state=f"sim{m}.state",
            util_attribution="exact",
        )
        for m, cs in enumerate(machines)
    ]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run_isolated, specs))
    for spec, per_second in zip(specs, results, strict=True):
        for c in spec["containers"]:
            if c["name"].startswith("fixed"):
                got = [round(w[c["name"]], 1) for w in per_second]
                assert all(abs(v - 30) <= 6 for v in got[2:]), (c["name"], got)
    s = results[1]
    both = [(round(w["share-30"], 1), round(w["share-70"], 1)) for w in s[1:5]]
    assert all(abs(a - 30) <= 6 and abs(b - 70) <= 6 for a, b in both), both
    assert s[7]["share-30"] >= 85, [round(w["share-30"], 1) for w in s]
    # Under a sanitizer (a slower, instrumented build) the hand-over gets one more second.
    back_from = 11 if SANITIZED else 10
    back = [(round(w["share-30"], 1), round(w["share-70-back"], 1)) for w in s[back_from:]]
    assert all(abs(a - 30) <= 6 and abs(b - 70) <= 6 for a, b in back), back
    # The exporter's view of one container: its limit from the config, and what it used.
    shown = read_ledger(Path(specs[0]["containers"][0]["ledger"]) / "cgpu.ledger").devices[0]
    assert (shown.compute_limit, shown.compute_policy) == (30, "fixed")
    assert abs(shown.compute_used - 30) <= 5, shown


PATHS = ["kernel_ptsz", "ex", "coop", "graph", "proc", "direct"]


def test_every_launch_path_is_gated(shim_env, sim_dir, load, tmp_path):
    # For each entry point (cuGetProcAddress and direct linking included), 4 processes saturate
    # a GPU through it with 5 ms kernels: the 25% limit holds.  Two machines of three GPUs.
    machines = [
        _spec(
            shim_env,
            sim_dir,
            load,
            tmp_path,
            3,
            [
                {
                    "name": path,
                    "env": _limit(25),
                    "processes": 4,
                    "kernel_ns": 5 * MS,
                    "seconds": 4.5,
                    "path": path,
                    "device": i,
                }
                for i, path in enumerate(group)
            ],
            [(1.0, 4.0)],
            state=f"paths{m}.state",
        )
        for m, group in enumerate((PATHS[:3], PATHS[3:]))
    ]
    with ThreadPoolExecutor(2) as pool:
        shares = {k: v for (r,) in pool.map(run_isolated, machines) for k, v in r.items()}
    assert sorted(shares) == sorted(PATHS)
    assert all(abs(v - 25) <= 5 for v in shares.values()), shares


def test_without_a_limit_the_gpu_is_not_throttled(shim_env, sim_dir, load, tmp_path):
    containers = [
        {
            "name": "free",
            "env": {},
            "processes": 2,
            "kernel_ns": 1 * MS,
            "seconds": 2.5,
        }
    ]
    spec = _spec(shim_env, sim_dir, load, tmp_path, 1, containers, [(0.5, 2.0)])
    (share,) = run_isolated(spec)
    assert share["free"] >= 95, share


def test_the_controller_trace_shows_what_it_measured(shim_env, sim_dir, load, tmp_path):
    """CGPU_COMPUTE_TRACE: one line per NVML measurement, with the container's measured share,
    the rate it is held to and the cost per launch it learnt."""
    trace = tmp_path / "trace"
    trace.mkdir()
    containers = [
        {
            "name": "traced",
            "env": {**_limit(30), "CGPU_COMPUTE_TRACE": str(trace)},
            "processes": 1,
            "kernel_ns": 1 * MS,
            "seconds": 2.5,
        }
    ]
    spec = _spec(shim_env, sim_dir, load, tmp_path, 1, containers, [(1.0, 2.5)])
    (share,) = run_isolated(spec)
    (path,) = trace.glob("compute-*.trace")
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# now_us dev measured_to_us span_us mine_pct")
    rows = [line.split() for line in lines[1:]]
    assert len(rows) >= 8  # about six periods a second
    assert {row[6] for row in rows} == {"0.300"}  # fixed: the rate is the limit
    late = [float(row[4]) for row in rows[len(rows) // 2 :]]
    assert abs(sum(late) / len(late) - share["traced"]) < 10, (late, share)
    assert int(rows[-1][7]) > 0  # a cost per launch was learnt


# ---- no cost without a limit -------------------------------------------------------------


def _lookup(load: Path, env: dict[str, str]) -> dict[str, tuple[str, str]]:
    proc = subprocess.run(
        [str(load), "lookup"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = {}
    for line in proc.stdout.splitlines():
        name, by_dlsym, by_proc = line.split()
        out[name] = (by_dlsym.split("=")[1], by_proc.split("=")[1])
    return out


@pytest.mark.parametrize(
    ("limits", "where"),
    [
        ({}, "driver"),
        ({"CGPU_MEM_LIMIT": "1GiB"}, "driver"),
        ({"CGPU_COMPUTE_LIMIT": "30", "CGPU_DISABLE": "true"}, "driver"),
        ({"CGPU_COMPUTE_LIMIT": "30"}, "shim"),
        ({"CGPU_COMPUTE_LIMIT_0": "30", "CGPU_COMPUTE_POLICY": "share"}, "shim"),
    ],
)
def test_launch_entry_points_are_hooked_only_under_a_limit(shim_env, load, limits, where):
    # Without a compute limit, dlsym and cuGetProcAddress hand out the driver's own functions.
    found = _lookup(load, shim_env(limits))
    assert len(found) == 8
    assert all(pair == (where, where) for pair in found.values()), found


def test_cgpu_conf_compute_line_hooks_a_process_without_the_variables(shim_env, load, ledger_dir):
    env = shim_env()
    assert all(pair == ("driver", "driver") for pair in _lookup(load, env).values())
    sim_uuid = _sim_uuid(env)
    write_config(ledger_dir, {sim_uuid: 16 << 30}, {sim_uuid: (40, "share")})
    found = _lookup(load, env)
    assert all(pair == ("shim", "shim") for pair in found.values()), found
    shown = read_ledger(ledger_dir / "cgpu.ledger").devices[0]
    assert (shown.compute_limit, shown.compute_policy) == (40, "share")


def _sim_uuid(env: dict[str, str]) -> str:
    code = (
        "import ctypes,sys; l=ctypes.CDLL('libnvidia-ml.so.1'); l.nvmlInit_v2(); "
        "h=ctypes.c_void_p(); l.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)); "
        "b=ctypes.create_string_buffer(96); l.nvmlDeviceGetUUID(h, b, 96); print(b.value.decode())"
    )
    bare = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    return subprocess.run(
        ["python3", "-c", code], env=bare, capture_output=True, text=True, check=True
    ).stdout.strip()


# ---- cost with a limit ---------------------------------------------------------------------


def _ns_per_launch(load: Path, env: dict[str, str], path: str) -> float:
    proc = subprocess.run(
        [str(load), "cost", path, "20000"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return float(proc.stdout.split()[-1])


@pytest.mark.skipif(SANITIZED, reason="timings mean nothing under a sanitizer")
def test_a_limit_adds_at_most_a_microsecond_per_launch(shim_env, load):
    # 0 ns kernels: the measured GPU time stays 0, so the gate never closes; what is left is
    # the launch path's own cost.  Best of 3 runs each, alternating.
    free, limited = [], []
    for _ in range(3):
        free.append(_ns_per_launch(load, shim_env(), "kernel"))
        limited.append(_ns_per_launch(load, shim_env({"CGPU_COMPUTE_LIMIT": "50"}), "kernel"))
    assert min(limited) - min(free) <= 1000, (free, limited)


# ---- robustness ----------------------------------------------------------------------------


def test_a_stopped_process_never_hangs_the_others(shim_env, load, ledger_dir):
    # Two processes share a 30% limit; one is stopped (it may be the controller). The other
    # keeps launching, and the stopped one resumes and finishes.
    env = shim_env({"CGPU_COMPUTE_LIMIT": "30"})
    args = [str(load), "run", "kernel", str(2 * MS), "3"]
    a = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    b = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    os.kill(a.pid, signal.SIGSTOP)
    before = read_ledger(ledger_dir / "cgpu.ledger")
    time.sleep(1.5)
    os.kill(a.pid, signal.SIGCONT)
    out_b, err_b = b.communicate(timeout=30)
    _out_a, err_a = a.communicate(timeout=30)
    assert b.returncode == 0 and a.returncode == 0, (err_a, err_b)
    assert int(out_b.split()[-1]) > 50, out_b  # ~0.3 s of GPU time a second in 2 ms kernels
    assert before.devices[0].compute_limit == 30


def test_garbage_in_the_compute_block_only_slows_this_container(shim_env, load, ledger_dir):
    # The container can write its ledger: absurd tickets, credit and cost must neither crash,
    # nor hang, nor lift the cap beyond what the controller then measures and repays.
    env = shim_env({"CGPU_COMPUTE_LIMIT": "30"})
    args = [str(load), "run", "kernel", str(1 * MS), "3"]
    p = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    path = ledger_dir / "cgpu.ledger"
    size = path.stat().st_size
    with path.open("r+b") as f:  # the compute blocks are the file's last 16 x 64 bytes
        f.seek(size - 16 * 64 + 16)
        f.write(b"\xff" * 40)  # tickets, credit, launches, beat, cost: all garbage
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert int(out.split()[-1]) > 0


# ---- the config line -----------------------------------------------------------------------


def test_config_compute_lines_round_trip(tmp_path):
    path = write_config(tmp_path, {UUID: 1 << 30}, {UUID: (30, "share")})
    assert load_config(path) == {UUID: 1 << 30}
    assert load_compute(path) == {UUID: (30, "share")}
    write = tmp_path / "two"
    write.mkdir()
    path = write_config(write, {UUID: 1 << 30}, {UUID: (100, "fixed")})
    assert load_compute(path) == {UUID: (100, "fixed")}


@pytest.mark.parametrize(
    "line",
    [
        f"compute {UUID} 0",
        f"compute {UUID} 101",
        f"compute {UUID} 30 greedy",
        f"compute {UUID} 30 fixed extra",
        f"compute {UUID}",
        "compute GPU-other 30",
        f"compute {UUID} 30\ncompute {UUID} 40",
    ],
)
def test_malformed_compute_lines_fail_closed(tmp_path, line):
    path = tmp_path / "cgpu.conf"
    path.write_text(f"version 1\ndevice {UUID} 1GiB\n{line}\n")
    with pytest.raises(ConfigError):
        load_config(path)


def test_a_compute_line_before_its_device_is_refused(tmp_path):
    path = tmp_path / "cgpu.conf"
    path.write_text(f"version 1\ncompute {UUID} 30\ndevice {UUID} 1GiB\n")
    with pytest.raises(ConfigError):
        load_config(path)
    with pytest.raises(ConfigError):
        render_config({UUID: 1 << 30}, {"GPU-x": (30, "fixed")})
