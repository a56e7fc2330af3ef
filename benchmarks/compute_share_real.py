"""Compute limit on a real GPU: each process's share of the GPU's time, under `fixed` and `share`.

    python benchmarks/compute_share_real.py [--seconds 8] [--kernel-ms 1.0]

A worker runs PyTorch's busy-wait kernel (`torch.cuda._sleep`, a fixed number of GPU clock
cycles) in batches of four, one after another, and counts the kernels finished in each second.
Its share of the GPU is (kernels in a window x one kernel's time alone) / window, with one
kernel's time measured first by a bare worker alone on the GPU. A "container" is one ledger
directory under `LD_PRELOAD=libcgpu.so` with `CGPU_COMPUTE_LIMIT`/`CGPU_COMPUTE_POLICY`, as the
device plugin would set it. The controller sees only the real NVML's samples. The first second
(torch's start, the controller's learning) is left out of the figures; the rest are the median,
lowest and highest per-second shares.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cgpu.core.paths import shim_path

WORKER = r"""
import json, sys, time, torch
cycles, seconds, start_at = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
torch.cuda.init()
torch.cuda._sleep(1000); torch.cuda.synchronize()
while time.time() < start_at:
    time.sleep(0.001)
t0 = time.perf_counter()
windows = [0] * int(seconds)
while True:
    for _ in range(4):
        torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    w = int(time.perf_counter() - t0)
    if w >= len(windows):
        break
    windows[w] += 4
print(json.dumps(windows), flush=True)
"""


def run_group(
    members: list[tuple[str, dict[str, str]]], cycles: int, seconds: float
) -> dict[str, list[int]]:
    """Start every member at the same instant; return each one's kernels per second."""
    start_at = time.time() + 6.0  # room for every worker to import torch and make its context
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-c", WORKER, str(cycles), str(seconds), str(start_at)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, env in members
    }
    out: dict[str, list[int]] = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=seconds + 120)
        if proc.returncode != 0:
            raise SystemExit(f"{name} failed ({proc.returncode}):\n{stderr[-3000:]}")
        out[name] = json.loads(stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--kernel-ms", type=float, default=1.0)
    parser.add_argument("--json", type=Path, help="write every window here too")
    parser.add_argument(
        "--trace", type=Path, help="a directory: each container's controller trace goes below it"
    )
    args = parser.parse_args()

    import torch

    clock_khz = torch.cuda.get_device_properties(0).clock_rate or 1_755_000
    cycles = int(args.kernel_ms * clock_khz)
    bare = {k: v for k, v in os.environ.items() if not k.startswith(("CGPU_", "LD_PRELOAD"))}
    with tempfile.TemporaryDirectory() as tmp:

        def container(name: str, percent: int, policy: str) -> dict[str, str]:
            ledger = Path(tmp, name)
            ledger.mkdir()
            env = dict(
                bare,
                LD_PRELOAD=str(shim_path()),
                CGPU_MEM_LIMIT="8GiB",
                CGPU_LEDGER_DIR=str(ledger),
                CGPU_COMPUTE_LIMIT=str(percent),
                CGPU_COMPUTE_POLICY=policy,
            )
            if args.trace:
                where = args.trace / f"{name}-{policy}{percent}"
                where.mkdir(parents=True, exist_ok=True)
                env["CGPU_COMPUTE_TRACE"] = str(where)
            return env

        alone = run_group([("bare", bare)], cycles, args.seconds)["bare"]
        per_kernel_s = 1.0 / statistics.median(alone[1:])
        scenarios = {
            "bare alone": [("bare", bare)],
            "fixed 30% alone": [("fixed30", container("a", 30, "fixed"))],
            "fixed 30% + fixed 70%": [
                ("fixed30", container("b", 30, "fixed")),
                ("fixed70", container("c", 70, "fixed")),
            ],
            "share 30% + share 70%": [
                ("share30", container("d", 30, "share")),
                ("share70", container("e", 70, "share")),
            ],
            "share 30% alone": [("share30", container("f", 30, "share"))],
            "bare + bare": [("bare1", bare), ("bare2", bare)],
        }
        report: dict[str, dict[str, list[float]]] = {}
        for title, members in scenarios.items():
            got = run_group(members, cycles, args.seconds)
            report[title] = {
                name: [round(100 * n * per_kernel_s, 1) for n in windows]
                for name, windows in got.items()
            }

    gpu = torch.cuda.get_device_name(0)
    print(f"# {time.strftime('%Y-%m-%d')} {gpu}, kernel {args.kernel_ms} ms ({cycles} cycles), "
          f"{per_kernel_s * 1e3:.3f} ms measured alone; share of GPU time per 1 s window from 1 s")
    print(f"{'scenario':26} {'process':9} {'median':>7} {'min':>6} {'max':>6}")
    for title, members in report.items():
        for name, shares in members.items():
            s = shares[1:]
            print(f"{title:26} {name:9} {statistics.median(s):7.1f} {min(s):6.1f} {max(s):6.1f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
