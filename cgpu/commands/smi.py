"""`cgpu smi`: GPU memory as NVML shows it to this process (the slice, under the shim)."""

from __future__ import annotations

import argparse
import sys

import pynvml

MiB = 1 << 20


def register(parser: argparse.ArgumentParser) -> None:
    """No options."""


def run(args: argparse.Namespace) -> int:
    """Print one line per GPU in nvidia-smi's Memory-Usage form."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        print(f"cgpu smi: NVML is not available: {exc}", file=sys.stderr)
        return 1
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            name = name.decode() if isinstance(name, bytes) else name
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            print(
                f"GPU {index}: {name} ({uuid})  Memory-Usage: "
                f"{mem.used // MiB}MiB / {mem.total // MiB}MiB  free {mem.free // MiB}MiB"
            )
    except pynvml.NVMLError as exc:
        print(f"cgpu smi: {exc}", file=sys.stderr)
        return 1
    finally:
        pynvml.nvmlShutdown()
    return 0
