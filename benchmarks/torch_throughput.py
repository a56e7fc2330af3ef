"""PyTorch allocation and kernel-launch throughput, bare and under the shim, on a real GPU.

    python benchmarks/torch_throughput.py [--rounds 5]

Allocation throughput runs with PYTORCH_NO_CUDA_MEMORY_CACHING=1, so every tensor is a real
cudaMalloc/cudaFree; launch throughput times small element-wise kernels. Rounds alternate bare
and shimmed worker processes; the ratios compare medians from the same run (target: >= 0.99).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from cgpu.paths import shim_path

WORKER = """
import sys, time, torch
kind, n = sys.argv[1], int(sys.argv[2])
torch.cuda.init()
x = torch.zeros(1024, device="cuda")
torch.cuda.synchronize()
if kind == "alloc":
    t0 = time.perf_counter()
    for _ in range(n):
        t = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
        del t
    torch.cuda.synchronize()
else:
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    torch.cuda.synchronize()
print(n / (time.perf_counter() - t0))
"""


def rate(kind: str, n: int, env: dict[str, str]) -> float:
    out = subprocess.run([sys.executable, "-c", WORKER, kind, str(n)], env=env,
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    bare = {k: v for k, v in os.environ.items() if not k.startswith("CGPU_")}
    bare["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    with tempfile.TemporaryDirectory() as ledger:
        shim = dict(bare, LD_PRELOAD=str(shim_path()), CGPU_MEM_LIMIT="16GiB",
                    CGPU_LEDGER_DIR=ledger)
        results: dict[str, dict[str, list[float]]] = {}
        for kind, n in (("alloc", 20000), ("launch", 200000)):
            results[kind] = {"bare": [], "shim": []}
            for _ in range(args.rounds):
                results[kind]["bare"].append(rate(kind, n, bare))
                results[kind]["shim"].append(rate(kind, n, shim))
    import torch

    gpu = torch.cuda.get_device_name(0)
    print(f"# {time.strftime('%Y-%m-%d')} {gpu} torch {torch.__version__}")
    print(f"{'what':28} {'bare /s':>12} {'shim /s':>12} {'ratio':>7}")
    for kind, label in (("alloc", "alloc+free (4 MiB)"), ("launch", "kernel launches")):
        b = statistics.median(results[kind]["bare"])
        s = statistics.median(results[kind]["shim"])
        print(f"{label:28} {b:12.0f} {s:12.0f} {s / b:7.3f}")


if __name__ == "__main__":
    main()
