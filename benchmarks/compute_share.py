"""Compute limit on the simulator: each scenario's share of GPU time against its target, and the
launch latency the shim adds with and without a limit, measured in one run.

    python benchmarks/compute_share.py [--seconds 11] [--launches 20000]

Shares come from the simulator's NVML per-process utilization (tests/shim/compute_kit.py), in
5 s windows. Latency: ns per cuLaunchKernel of a 0 ns kernel, best of 5 rounds 100 ms apart (so
a limited container is within its budget: the wait that enforces a limit is not overhead), through
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
from compute_kit import build_load, run_isolated

MS = 1_000_000


def base_env(tmp: Path, state: str, devices: int, shim: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CGPU_", "LD_PRELOAD"))}
    env.update(
        LD_LIBRARY_PATH=str(sim_lib_dir()),
        CGPU_SIM_STATE=str(tmp / state),
        CGPU_SIM_DEVICES=str(devices),
        CGPU_SIM_MEMORY="16GiB",
    )
    if shim:
        env["LD_PRELOAD"] = str(shim_path())
    return env


def limit(percent: int, policy: str = "fixed") -> dict[str, str]:
    return {"CGPU_COMPUTE_LIMIT": str(percent), "CGPU_COMPUTE_POLICY": policy}


def machines(tmp: Path, load: Path, seconds: float) -> list[dict]:
    """Two simulated machines of four GPUs, one scenario per GPU."""
    out = []
    for m, kernel_ns in enumerate((10_000, 50 * MS)):
        containers = [
            {
                "name": f"fixed 30%, {n:2d} proc, {kernel_ns // 1000:>5} us kernels",
                "env": limit(30),
                "processes": n,
                "kernel_ns": kernel_ns,
                "seconds": seconds + 0.5,
                "device": i,
            }
            for i, n in enumerate((1, 4, 16))
        ]
        if m == 0:
            containers += [
                {
                    "name": "share 30% (beside 70%)",
                    "env": limit(30, "share"),
                    "processes": 2,
                    "kernel_ns": MS,
                    "seconds": seconds + 2.0,
                    "device": 3,
                },
                {
                    "name": "share 70% (beside 30%)",
                    "env": limit(70, "share"),
                    "processes": 2,
                    "kernel_ns": MS,
                    "seconds": 6.0,
                    "device": 3,
                },
            ]
        else:
            containers += [
                {
                    "name": "share 30%, alone first",
                    "env": limit(30, "share"),
                    "processes": 2,
                    "kernel_ns": MS,
                    "seconds": seconds + 0.5,
                    "device": 3,
                },
                {
                    "name": "share 70%, joins at 2 s",
                    "env": limit(70, "share"),
                    "processes": 2,
                    "kernel_ns": MS,
                    "seconds": 8.0,
                    "device": 3,
                    "start_after": 2.0,
                },
            ]
        for c in containers:
            c["ledger"] = str(tmp / "ledgers" / f"{m}-{c['device']}-{c['name'][:9].strip()}")
        env = base_env(tmp, f"machine{m}.state", 4, shim=True)
        out.append(
            {
                "sim_dir": str(sim_lib_dir()),
                "state": env["CGPU_SIM_STATE"],
                "load": str(load),
                "env": env,
                "containers": containers,
                "windows": [
                    (1.0, 6.0),
                    (6.0, 11.0),
                    (7.5, seconds + 1.5),
                    (0.5, 2.0),
                    (2.0, 2.5),
                    (2.5, 3.0),
                    (3.0, 8.0),
                ],
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=11.0)
    parser.add_argument("--launches", type=int, default=20_000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cgpu-compute-"))
    try:
        load = build_load(shutil.which("cc") or "cc", sim_lib_dir(), tmp)
        specs = machines(tmp, load, args.seconds)
        with ThreadPoolExecutor(len(specs)) as pool:
            results = list(pool.map(run_isolated, specs))
        print("scenario                                 target  0-5 s    5-10 s   after 70% stops")
        for spec, (first, second, alone, *_rest) in zip(specs, results, strict=True):
            for c in spec["containers"]:
                name = c["name"]
                if not name.startswith(("fixed", "share 30% (", "share 70% (")):
                    continue
                target = int(c["env"]["CGPU_COMPUTE_LIMIT"])
                late = f"{alone[name]:5.1f}% (>= 90%)" if name.startswith("share 30") else ""
                cols = f"{first[name]:5.1f}%  " + (
                    f"{second[name]:5.1f}%  " if name.startswith("fixed") else "   -     "
                )
                print(f"{name:40s} {target:4d}%  {cols} {late}")
        w = results[1]
        print("\nshare 30% alone, then a share 70% container joins at 2 s (its back-off):")
        for label, i in (("0.5-2 s (alone)", 3), ("2-2.5 s", 4), ("2.5-3 s", 5), ("3-8 s", 6)):
            print(
                f"  {label:16s} 30%: {w[i]['share 30%, alone first']:5.1f}%   "
                f"70%: {w[i]['share 70%, joins at 2 s']:5.1f}%"
            )
        print("\nlaunch latency, ns per cuLaunchKernel (0 ns kernel, best of 3 x 5 rounds):")
        for label, ns in latency(load, tmp, args.launches):
            print(f"  {label:40s} {ns:8.1f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
