"""Allocate device memory through the CUDA driver API (cuda-python) until it runs out."""

from __future__ import annotations

import argparse

from cuda.bindings import driver as cu


def check(result: tuple) -> tuple:
    err, *rest = result
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err}")
    return tuple(rest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunk-mib", type=int, default=256)
    args = parser.parse_args()
    check(cu.cuInit(0))
    (dev,) = check(cu.cuDeviceGet(0))
    (ctx,) = check(cu.cuDevicePrimaryCtxRetain(dev))
    check(cu.cuCtxSetCurrent(ctx))
    free, total = check(cu.cuMemGetInfo())
    print(f"cuMemGetInfo: free {free >> 20} MiB of {total >> 20} MiB")
    chunk, held = args.chunk_mib << 20, []
    while True:
        err, ptr = cu.cuMemAlloc(chunk)
        if err != cu.CUresult.CUDA_SUCCESS:
            print(f"allocation {len(held) + 1} refused: {err.name}")
            break
        held.append(ptr)
    print(f"allocated {len(held)} x {args.chunk_mib} MiB = {len(held) * args.chunk_mib} MiB")
    for ptr in held:
        check(cu.cuMemFree(ptr))


if __name__ == "__main__":
    main()
