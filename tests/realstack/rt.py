"""Inside the scripts: NVIDIA's libcudart through ctypes, from the pinned wheels.

libcudart 12.9 comes from nvidia-cuda-runtime-cu12, libcudart 13 from torch's own
nvidia-cuda-runtime wheel. Nothing here touches CUDA until a test calls it.
"""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path

CUDA_SUCCESS = 0


def _nvidia_dirs() -> list[Path]:
    """The `nvidia` namespace package's folders (one per site-packages that holds a wheel)."""
    spec = importlib.util.find_spec("nvidia")
    assert spec and spec.submodule_search_locations, "no nvidia wheels installed"
    return [Path(p) for p in spec.submodule_search_locations]


def cudart_path(major: int) -> Path:
    """The libcudart.so.<major> of the pinned wheels."""
    sub = "cuda_runtime/lib" if major == 12 else f"cu{major}/lib"
    paths = [d / sub / f"libcudart.so.{major}" for d in _nvidia_dirs()]
    found = [p for p in paths if p.is_file()]
    assert found, f"{paths[0]} is missing"
    return found[0]


class Cudart:
    """The few runtime calls the tests make; each returns the cudaError_t and the values."""

    def __init__(self, major: int) -> None:
        self.lib = ctypes.CDLL(str(cudart_path(major)))

    def version(self) -> int:
        v = ctypes.c_int()
        assert self.lib.cudaRuntimeGetVersion(ctypes.byref(v)) == CUDA_SUCCESS
        return v.value

    def mem_get_info(self) -> tuple[int, int]:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        rc = self.lib.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total))
        assert rc == CUDA_SUCCESS, f"cudaMemGetInfo: {self.error(rc)}"
        return free.value, total.value

    def error(self, rc: int) -> str:
        self.lib.cudaGetErrorName.restype = ctypes.c_char_p
        return f"{self.lib.cudaGetErrorName(rc).decode()} ({rc})"

    def malloc(self, size: int) -> tuple[int, int]:
        ptr = ctypes.c_void_p()
        rc = self.lib.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(size))
        return rc, ptr.value or 0

    def free(self, ptr: int) -> int:
        return self.lib.cudaFree(ctypes.c_void_p(ptr))

    def malloc_async(self, size: int) -> tuple[int, int]:
        ptr = ctypes.c_void_p()
        rc = self.lib.cudaMallocAsync(ctypes.byref(ptr), ctypes.c_size_t(size), None)
        if rc == CUDA_SUCCESS:
            rc = self.lib.cudaStreamSynchronize(None)
        return rc, ptr.value or 0

    def free_async(self, ptr: int) -> int:
        rc = self.lib.cudaFreeAsync(ctypes.c_void_p(ptr), None)
        return rc or self.lib.cudaStreamSynchronize(None)


class CudaError(Exception):
    """A runtime call's error, as the client would raise it."""


class _ProcessInfo(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


def driver_used(pid: int) -> int:
    """What the driver charges process `pid` on GPU 0, as NVML's compute process list says.

    The simulator's libnvidia-ml is called through its own handle, so the shim (which answers
    the slice where a program asks NVML) does not stand between: this is the device's figure,
    to hold against the ledger's.
    """
    from cgpu.core.paths import sim_lib_dir

    nvml = ctypes.CDLL(str(sim_lib_dir() / "libnvidia-ml.so.1"))
    assert nvml.nvmlInit_v2() == 0
    dev = ctypes.c_void_p()
    assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0
    infos = (_ProcessInfo * 64)()
    count = ctypes.c_uint(64)
    assert nvml.nvmlDeviceGetComputeRunningProcesses_v2(dev, ctypes.byref(count), infos) == 0
    return sum(p.usedGpuMemory for p in infos[: count.value] if p.pid == pid)
