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


class _DlInfo(ctypes.Structure):
    _fields_ = (
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    )


def _file_of(symbol: ctypes._CFuncPtr) -> str:  # type: ignore[name-defined]
    """The path of the shared object that holds `symbol`, with symbolic links resolved."""
    dladdr = ctypes.CDLL(None).dladdr
    dladdr.argtypes = (ctypes.c_void_p, ctypes.POINTER(_DlInfo))
    info = _DlInfo()
    if not dladdr(ctypes.cast(symbol, ctypes.c_void_p), ctypes.byref(info)) or not info.dli_fname:
        return ""
    return os.path.realpath(info.dli_fname.decode())


def real_driver_present() -> bool:
    """Whether a real NVIDIA driver (libcuda.so.1 outside our simulator) can be loaded.

    The answer comes from the file that holds the `cuInit` the loader found. A real driver's
    file is named by its version (libcuda.so.580.159.04, reached through the libcuda.so.1
    link), so the name alone says nothing.
    """
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        cu_init = cuda.cuInit
    except (OSError, AttributeError):
        return False
    path = _file_of(cu_init)
    sim = str(sim_lib_dir().resolve())
    return bool(path) and not path.startswith(sim + os.sep)


def nvml_text(value: str | bytes) -> str:
    """A string NVML returned (bytes from older nvidia-ml-py releases)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


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
                    uuid=nvml_text(pynvml.nvmlDeviceGetUUID(handle)),
                    name=nvml_text(pynvml.nvmlDeviceGetName(handle)),
                    total_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                )
            )
        return gpus
    except pynvml.NVMLError as exc:
        raise GPUError(f"NVML query failed: {exc}") from exc
    finally:
        pynvml.nvmlShutdown()
