"""What each CUDA context costs on a real GPU, by the driver's own per-process figure.

    python -P benchmarks/context_cost_real.py [--contexts 3] [--under-shim]

The shim charges a device's context overhead once per process (docs/architecture.md, "What is
not charged"), and the simulator models the same: the first context on a device costs
CGPU_SIM_CTX_OVERHEAD, later ones nothing. This measures what the real driver takes: NVML's
usedGpuMemory for this process after the primary context, after each further context made with
cuCtxCreate, and after they are destroyed. With --under-shim it runs itself again under the shim
(a 4 GiB slice) and prints the shim's own figure (the slice less cuMemGetInfo's free) beside it.
Prints one line per step: step, NVML MiB, shim MiB (or -).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

import pynvml

MiB = 1 << 20


def nvml_used(handle: object, pid: int) -> int:
    """NVML's usedGpuMemory of `pid` on the GPU, bytes (0 if not listed)."""
    listed = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    return sum(p.usedGpuMemory or 0 for p in listed if p.pid == pid)


def measure(contexts: int, slice_bytes: int) -> None:
    """Make the contexts and print what each step holds."""
    cuda = ctypes.CDLL("libcuda.so.1")
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert cuda.cuInit(0) == 0

    def shim_figure() -> str:
        if not slice_bytes:
            return "-"
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        if cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) != 0:
            return "?"
        return f"{(slice_bytes - free.value) / MiB:.1f}"

    def show(step: str) -> None:
        print(
            f"{step:<22} {nvml_used(handle, os.getpid()) / MiB:8.1f} {shim_figure():>8}", flush=True
        )

    primary = ctypes.c_void_p()
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(primary), 0) == 0
    assert cuda.cuCtxSetCurrent(primary) == 0
    show("primary context")
    made = []
    for i in range(contexts):
        ctx = ctypes.c_void_p()
        rc = cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0)
        if rc != 0:
            print(f"cuCtxCreate {i + 2}: error {rc}", flush=True)
            break
        made.append(ctx)
        show(f"context {i + 2}")
    for ctx in made:
        cuda.cuCtxDestroy_v2(ctx)
    assert cuda.cuCtxSetCurrent(primary) == 0
    show("others destroyed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, default=3, help="contexts beside the primary")
    parser.add_argument("--under-shim", action="store_true", help="also run under the shim")
    parser.add_argument("--slice", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    print(
        f"{'step':<22} {'NVML MiB':>8} {'shim MiB':>8}"
        + (" (under the shim)" if args.slice else "")
    )
    measure(args.contexts, args.slice)
    if args.under_shim and not args.slice:
        from cgpu.core.paths import shim_path

        with tempfile.TemporaryDirectory() as ledger:
            env = dict(
                os.environ,
                LD_PRELOAD=str(shim_path()),
                CGPU_MEM_LIMIT="4GiB",
                CGPU_LEDGER_DIR=ledger,
            )
            cmd = [sys.executable, "-P", __file__, "--contexts", str(args.contexts)]
            subprocess.run([*cmd, "--slice", str(4 << 30)], env=env, check=False)


if __name__ == "__main__":
    main()
