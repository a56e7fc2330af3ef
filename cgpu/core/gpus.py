"""GPU discovery through NVML (nvidia-ml-py), with the simulator as a fallback."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

import pynvml

from cgpu.core.paths import sim_lib_dir


class GPUError(RuntimeError):
    """NVML is missing or refused a query."""


@dataclass(frozen=True)
class GPU:
    """One GPU as NVML reports it."""

    index: int
    uuid: str
    name: str
    total_bytes: int


def use_simulator() -> None:
    """Make this process's NVML the simulator's, before pynvml loads a library."""
    ctypes.CDLL(str(sim_lib_dir() / "libnvidia-ml.so.1"), mode=os.RTLD_NOW | os.RTLD_GLOBAL)


def real_driver_present() -> bool:
    """Whether a real NVIDIA driver (libcuda.so.1 outside our simulator) can be loaded."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    sim = str(sim_lib_dir().resolve())
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if line.rstrip().endswith("libcuda.so.1")}
    return any(not os.path.realpath(p).startswith(sim) for p in paths)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def list_gpus() -> list[GPU]:
    """All GPUs NVML sees, by NVML index."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise GPUError(f"NVML is not available: {exc}") from exc
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append(
                GPU(
                    index=index,
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    total_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                )
            )
        return gpus
    except pynvml.NVMLError as exc:
        raise GPUError(f"NVML query failed: {exc}") from exc
    finally:
        pynvml.nvmlShutdown()
