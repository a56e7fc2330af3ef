"""Hold some GPU memory through PyTorch, say "ready", and keep it until killed (or 60 s)."""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=1024)
    args = parser.parse_args()
    held = torch.empty(args.mib << 20, dtype=torch.uint8, device="cuda")
    print(f"ready: holding {held.numel() >> 20} MiB", flush=True)
    time.sleep(60)


if __name__ == "__main__":
    main()
