"""Inside the scripts: NVIDIA's libcudart through ctypes, from the pinned wheels.

libcudart 12.9 comes from nvidia-cuda-runtime-cu12, libcudart 13 from torch's own
nvidia-cuda-runtime wheel, libcudart 11.8 from nvidia-cuda-runtime-cu11, installed beside the
venv (scripts/install-clients.sh). Nothing here touches CUDA until a test calls it.
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
from pathlib import Path

CUDA_SUCCESS = 0


def _nvidia_dirs() -> list[Path]:
    """The `nvidia` namespace package's folders (one per site-packages that holds a wheel)."""
    spec = importlib.util.find_spec("nvidia")
    assert spec and spec.submodule_search_locations, "no nvidia wheels installed"
    return [Path(p) for p in spec.submodule_search_locations]


def cudart_path(major: int) -> Path:
    """The libcudart.so.<major> of the pinned wheels."""
    if major == 11:
        beside = Path(sys.prefix, "cgpu-clients", "cudart-cu11", "nvidia", "cuda_runtime", "lib")
        path = beside / "libcudart.so.11.0"
        assert path.is_file(), f"{path} is missing (scripts/install-clients.sh)"
        return path
    sub = "cuda_runtime/lib" if major == 12 else f"cu{major}/lib"
    paths = [d / sub / f"libcudart.so.{major}" for d in _nvidia_dirs()]
    found = [p for p in paths if p.is_file()]
    assert found, f"{paths[0]} is missing"
    return found[0]


class Cudart:
    """The few runtime calls the tests make; each returns the cudaError_t and the values."""

    def __init__(self, major: int) -> None:
        self.lib = ctypes.CDLL(str(cudart_path(major)))
        self._registered: list[object] = []

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


    def register_kernel(self, fatbin: bytes, name: str) -> ctypes.Array[ctypes.c_char]:
        """Register a fat binary and one kernel of it with the runtime, as the code nvcc
        generates does at start-up (__cudaRegisterFatBinary, __cudaRegisterFunction): the
        runtime loads the module at the kernel's first launch. Returns the kernel's host
        handle (what cudaLaunchKernel takes); the image stays registered for the process."""
        image = ctypes.create_string_buffer(fatbin)
        wrapper = _FatbinWrapper(0x466243B1, 1, ctypes.addressof(image), None)
        # getattr: the names start with two underscores, which a class body would mangle.
        register_fatbin = getattr(self.lib, "__cudaRegisterFatBinary")
        register_fatbin.restype = ctypes.c_void_p
        handle = ctypes.c_void_p(register_fatbin(ctypes.byref(wrapper)))
        host = ctypes.create_string_buffer(16)  # any address the process owns names the kernel
        register_function = getattr(self.lib, "__cudaRegisterFunction")
        register_function(handle, host, name.encode(), name.encode(), -1, *[None] * 5)
        if hasattr(self.lib, "__cudaRegisterFatBinaryEnd"):  # from CUDA 10.1
            getattr(self.lib, "__cudaRegisterFatBinaryEnd")(handle)
        self._registered.append((image, wrapper, host))
        return host

    def launch(self, host: ctypes.Array[ctypes.c_char]) -> int:
        """Launch a registered kernel without parameters on one thread, and wait for it."""
        one = _Dim3(1, 1, 1)
        rc = self.lib.cudaLaunchKernel(host, one, one, None, ctypes.c_size_t(0), None)
        return rc or self.lib.cudaDeviceSynchronize()


class _FatbinWrapper(ctypes.Structure):
    """__fatBinC_Wrapper_t, as nvcc's generated code hands it to __cudaRegisterFatBinary."""

    _fields_ = [
        ("magic", ctypes.c_int),
        ("version", ctypes.c_int),
        ("data", ctypes.c_void_p),
        ("filename_or_fatbins", ctypes.c_void_p),
    ]


class _Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


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
