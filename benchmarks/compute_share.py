"""Compute limit on the simulator with NVML as coarse as the real one: each case of the contract's
table, its share of the GPU's time in every 1 s window, and the launch latency the shim adds with
and without a limit, measured in one run.

    python benchmarks/compute_share.py [--seconds 12] [--launches 20000]

The controllers see only NVML's samples (1/6 s periods, whole percent, lastSeenTimeStamp). The
shares are the simulator's exact kernel time per process (tests/shim/compute_kit.py), read per
1 s window. Latency: ns per cuLaunchKernel of a 0 ns kernel, best of 5 rounds 100 ms apart (so a
limited container is within its budget: the wait that enforces a limit is not overhead), through
dlsym, cuGetProcAddress and direct linking, without the shim, with it and no limit, with a limit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cgpu.core.paths import shim_path, sim_lib_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "shim"))
from compute_kit import build_load, one_second_windows, pidns_works, run_isolated

MS = 1_000_000
STOP, BACK = 5.0, 8.0  # `share`: the 70% container stops, and a new one arrives


def base_env(
    tmp: Path, state: str, devices: int, shim: bool, attribution: str = "sampled"
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CGPU_", "LD_PRELOAD"))}
    env.update(
        LD_LIBRARY_PATH=str(sim_lib_dir()),
        CGPU_SIM_STATE=str(tmp / state),
        CGPU_SIM_DEVICES=str(devices),
        CGPU_SIM_MEMORY="16GiB",
        CGPU_SIM_UTIL_ATTRIBUTION=attribution,
    )
    if shim:
        env["LD_PRELOAD"] = str(shim_path())
    return env


def limit(percent: int, policy: str = "fixed") -> dict[str, str]:
    return {"CGPU_COMPUTE_LIMIT": str(percent), "CGPU_COMPUTE_POLICY": policy}


def fixed(n: int, kernel_ns: int, device: int, seconds: float, **extra) -> dict:
    unit = f"{kernel_ns // MS} ms" if kernel_ns >= MS else f"{kernel_ns // 1000} us"
    what = f"{extra.get('threads', 1)} streams" if extra.get("threads") else f"{n:2d} proc"
    return {
        "name": f"fixed 30%, {what}, {unit}" + (", pid ns" if extra.get("pidns") else ""),
        "env": limit(30),
        "processes": n,
        "kernel_ns": kernel_ns,
        "seconds": seconds + 0.5,
        "device": device,
        **extra,
    }


def machines(tmp: Path, load: Path, seconds: float, attribution: str) -> list[dict]:
    """Four simulated machines of four GPUs, one case per GPU, run two at a time."""
    pidns = pidns_works()
    share = {"env": limit(30, "share"), "processes": 2, "kernel_ns": 200_000, "device": 3}
    groups = [
        [fixed(n, 10_000, i, seconds) for i, n in enumerate((1, 4, 16))]
        + [fixed(1, 200_000, 3, seconds, threads=4, path="kernel_ptsz")],
        [fixed(n, 50 * MS, i, seconds) for i, n in enumerate((1, 4, 16))]
        + [
            {**share, "name": "share 30%", "seconds": seconds + 0.5},
            {**share, "name": "share 70%", "env": limit(70, "share"), "seconds": STOP},
            {
                **share,
                "name": "share 70%, back",
                "env": limit(70, "share"),
                "seconds": seconds - BACK + 0.5,
                "start_after": BACK,
            },
        ],
        [fixed(n, MS, i, seconds) for i, n in enumerate((1, 4))]
        + ([fixed(2, MS, 2, seconds, pidns=True)] if pidns else [])
        + [fixed(4, 5 * MS, 3, seconds, threads=4, path="kernel_ptsz")],
    ]
    out = []
    for m, containers in enumerate(groups):
        for i, c in enumerate(containers):
            c["ledger"] = str(tmp / "ledgers" / f"{m}-{i}")
        env = base_env(tmp, f"machine{m}.state", 4, shim=True, attribution=attribution)
        out.append(
            {
                "sim_dir": str(sim_lib_dir()),
                "state": env["CGPU_SIM_STATE"],
                "load": str(load),
                "env": env,
                "containers": containers,
                "windows": one_second_windows(0.0, seconds),
            }
        )
    return out


def latency(load: Path, tmp: Path, launches: int) -> list[tuple[str, float]]:
    def once(path: str, shim: bool, extra: dict[str, str]) -> float:
        env = {**base_env(tmp, "latency.state", 1, shim), **extra}
        env["CGPU_LEDGER_DIR"] = str(tmp / "latency-ledger")
        (tmp / "latency-ledger").mkdir(exist_ok=True)
        out = subprocess.run(
            [str(load), "cost", path, str(launches)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return float(out.split()[-1])

    rows = []
    for path in ("kernel", "proc", "direct"):
        bare = min(once(path, False, {}) for _ in range(3))
        free = min(once(path, True, {}) for _ in range(3))
        limited = min(once(path, True, limit(50)) for _ in range(3))
        rows += [
            (f"{path:6s} without the shim", bare),
            (f"{path:6s} shim, no limit  (+{free - bare:6.1f} ns)", free),
            (f"{path:6s} shim, 50% limit (+{limited - bare:6.1f} ns)", limited),
        ]
    return rows


def verdict(name: str, shares: list[float]) -> str:
    """Each case's promise, over the windows it applies to."""
    if name.startswith("fixed"):
        worst = max(abs(v - 30) for v in shares[1:])
        return f"from 1 s: worst |x-30| = {worst:4.1f} ({'ok' if worst <= 5 else 'MISSED'})"
    if name == "share 30%":
        both = shares[1 : int(STOP)]
        alone = shares[int(STOP) + 2 : int(BACK)]
        back = shares[int(BACK) + 2 :]
        ok = all(abs(v - 30) <= 5 for v in both + back) and all(v >= 90 for v in alone)
        return (
            f"with 70%: {min(both):4.1f}-{max(both):4.1f}; alone from {STOP + 1:.0f} s: "
            f"{min(alone):4.1f}; from {BACK + 2:.0f} s: {min(back):4.1f}-{max(back):4.1f} "
            f"({'ok' if ok else 'MISSED'})"
        )
    if name.startswith("share 70%"):
        run = shares[1 : int(STOP)] if name == "share 70%" else shares[int(BACK) + 2 :]
        ok = all(abs(v - 70) <= 5 for v in run)
        return f"{min(run):4.1f}-{max(run):4.1f} ({'ok' if ok else 'MISSED'})"
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--launches", type=int, default=20_000)
    parser.add_argument(
        "--attribution",
        choices=("sampled", "exact"),
        default="sampled",
        help="NVML names one process per period where several ran, as a real H100 does "
        "(sampled), or gives each its own busy %% (exact)",
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cgpu-compute-"))
    try:
        load = build_load(shutil.which("cc") or "cc", sim_lib_dir(), tmp)
        specs = machines(tmp, load, args.seconds, args.attribution)
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(run_isolated, specs))
        n = int(args.seconds)
        print(
            "share of the GPU's time in each 1 s window (percent); `share` 70% stops at "
            f"{STOP:.0f} s, another 70% arrives at {BACK:.0f} s"
        )
        print(f"{'case':34s} " + " ".join(f"{i:>5d}" for i in range(n)))
        for spec, per_second in zip(specs, results, strict=True):
            for c in spec["containers"]:
                shares = [w[c["name"]] for w in per_second]
                print(f"{c['name']:34s} " + " ".join(f"{v:5.1f}" for v in shares))
                print(f"{'':34s} {verdict(c['name'], shares)}")
        print("\nlaunch latency, ns per cuLaunchKernel (0 ns kernel, best of 3 x 5 rounds):")
        for label, ns in latency(load, tmp, args.launches):
            print(f"  {label:40s} {ns:8.1f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
