"""The shim's cost on PyTorch's allocation path, on the simulated GPU: bare against under the
shim, alternated in one run.

    python benchmarks/torch_alloc.py [--rounds 7] [--n 20000] [--size 4MiB] [--other PATH]

PYTORCH_NO_CUDA_MEMORY_CACHING=1 turns PyTorch's caching allocator off, so every tensor is a
cudaMalloc and a cudaFree through NVIDIA's libcudart down to the driver (here the simulator's
libcuda). Each round runs one bare worker and one shimmed worker (a 16 GiB slice in a fresh
ledger). A worker times 10 batches of n/10 pairs and reports its best batch; the figures are
the best and the median of the rounds' reports (on a busy machine the best is the steadier one).
The ratio is shim rate / bare rate.  --other adds another build of libcgpu.so (an older
one, say), alternated in the same rounds; the workers of a round run in a rotating order.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cgpu.core.paths import shim_path, sim_lib_dir

WORKER = """
import sys, time, torch
n, size = int(sys.argv[1]), int(sys.argv[2])
keep = torch.zeros(1024, device="cuda")
torch.cuda.synchronize()
best = float("inf")
for _ in range(10):  # the best of 10 batches: a busy machine's pauses fall in the others
    t0 = time.perf_counter()
    for _ in range(n // 10):
        t = torch.empty(size, dtype=torch.uint8, device="cuda")
        del t
    torch.cuda.synchronize()
    best = min(best, (time.perf_counter() - t0) / (n // 10) * 1e9)
print(best)
"""

SIZES = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_size(text: str) -> int:
    """4MiB -> 4194304."""
    for suffix, mult in SIZES.items():
        if text.endswith(suffix):
            return int(text.removesuffix(suffix)) * mult
    return int(text)


def pair_ns(n: int, size: int, env: dict[str, str]) -> float:
    """ns per alloc+free pair in one fresh worker."""
    out = subprocess.run(
        [sys.executable, "-c", WORKER, str(n), str(size)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--size", default="4MiB")
    parser.add_argument("--other", type=Path, help="another libcgpu.so to alternate with")
    args = parser.parse_args()
    size = parse_size(args.size)
    bare = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CGPU_", "PYTORCH_")) and k != "LD_PRELOAD"
    }
    bare.update(
        LD_LIBRARY_PATH=str(sim_lib_dir()),
        CGPU_SIM_MEMORY="80GiB",
        PYTORCH_NO_CUDA_MEMORY_CACHING="1",
    )
    shims = {"shim": shim_path(), **({"other": args.other} if args.other else {})}
    names = ["bare", *shims]
    results: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as ledgers:
            envs = {"bare": bare}
            for name, path in shims.items():
                ledger = os.path.join(ledgers, name)
                os.mkdir(ledger)
                envs[name] = dict(
                    bare, LD_PRELOAD=str(path), CGPU_MEM_LIMIT="16GiB", CGPU_LEDGER_DIR=ledger
                )
            k = r % len(names)  # each worker takes each place in turn
            for name in names[k:] + names[:k]:
                results[name].append(pair_ns(args.n, size, envs[name]))
    import torch

    print(
        f"# {time.strftime('%Y-%m-%d')} {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, torch {torch.__version__}, driver = the simulator"
    )
    print(f"# alloc+free pairs of {args.size}, {args.n} per worker, {args.rounds} rounds")
    for name in names[1:]:
        head = f"{'bare ns':>8} {'ns':>8} {'added ns':>9} {'ratio':>7}"
        print(f"{name + ': alloc+free, no cache':30} {head}")
        for label, pick in (("best", min), ("median", statistics.median)):
            b, s = pick(results["bare"]), pick(results[name])
            print(f"{'  ' + label:30} {b:8.0f} {s:8.0f} {s - b:9.0f} {b / s:7.3f}")
        ratios = sorted(b / s for b, s in zip(results["bare"], results[name], strict=True))
        print(
            f"{'  ratio per round (min/med/max)':30} {ratios[0]:.3f} / "
            f"{statistics.median(ratios):.3f} / {ratios[-1]:.3f}"
        )
    for name in names:
        print(f"rounds {name}: " + " ".join(f"{x:.0f}" for x in results[name]))


if __name__ == "__main__":
    main()
