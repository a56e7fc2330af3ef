"""Allocate device memory through PyTorch until it runs out, then print PyTorch's own error."""

from __future__ import annotations

import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunk-mib", type=int, default=512)
    args = parser.parse_args()
    free, total = torch.cuda.mem_get_info()
    props = torch.cuda.get_device_properties(0)
    print(f"torch {torch.__version__} on {props.name}: total_memory {props.total_memory >> 20} MiB")
    print(f"torch.cuda.mem_get_info(): free {free >> 20} MiB of {total >> 20} MiB")
    held = []
    try:
        while True:
            held.append(torch.empty(args.chunk_mib << 20, dtype=torch.uint8, device="cuda"))
            print(f"  allocated {len(held) * args.chunk_mib} MiB")
    except torch.OutOfMemoryError as exc:
        print(f"torch.OutOfMemoryError: {str(exc).splitlines()[0]}")
    held.clear()
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    print(f"after freeing: free {free >> 20} MiB of {total >> 20} MiB")


if __name__ == "__main__":
    main()
