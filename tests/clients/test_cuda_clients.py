"""CUDA clients from PyPI under `cgpu run --gpu-mem 4GiB`: each sees the slice as its total,
stops with its own out-of-memory error within one chunk of the slice, and gets it all back.

(NVIDIA's own CUDA runtime and the clients built on it, PyTorch and CuPy, are in
tests/realstack.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clientkit import require
from inside import CHUNK, SLICE

Run = Callable[..., dict[str, Any]]


def check_fill(result: dict[str, Any], error_type: str, error_text: str) -> None:
    """The contract every client meets under a slice."""
    assert result["total"] == SLICE
    assert result["error"]["type"] == error_type, result["error"]
    assert error_text in result["error"]["message"], result["error"]
    # Stopped by the slice, within one chunk of it (context overhead is charged too).
    assert SLICE - CHUNK < result["allocated"] + result["ledger_before"] <= SLICE, result
    assert result["ledger_full"] <= SLICE and result["free_full"] < CHUNK, result
    assert result["ledger_full"] - result["ledger_before"] >= result["allocated"], result
    # Freeing gives everything back: the ledger and the client's own free figure.
    assert result["ledger_after"] == result["ledger_before"], result
    assert result["free_after"] == result["free_before"], result


def test_cuda_python_driver_bindings(run_client: Run) -> None:
    require("cuda-python")
    result = run_client("""
        import inside
        from cuda.bindings import driver as drv

        def check(out):
            # (error, *values) as the bindings return it: the values, or raise the error
            err, *values = out
            if err != drv.CUresult.CUDA_SUCCESS:
                raise RuntimeError(drv.cuGetErrorName(err)[1].decode())
            return values[0] if len(values) == 1 else tuple(values)

        check(drv.cuInit(0))
        dev = check(drv.cuDeviceGet(0))
        ctx = check(drv.cuDevicePrimaryCtxRetain(dev))
        check(drv.cuCtxSetCurrent(ctx))

        def release(ptrs):
            for p in ptrs:
                check(drv.cuMemFree(p))

        result = inside.exercise(
            lambda: check(drv.cuMemAlloc(inside.CHUNK)), release, lambda: check(drv.cuMemGetInfo())
        )
        inside.report(device_total=check(drv.cuDeviceTotalMem(dev)), **result)
    """)
    check_fill(result, "builtins.RuntimeError", "CUDA_ERROR_OUT_OF_MEMORY")
    assert result["device_total"] == SLICE


CUDA_CORE_SETUP = """
    import inside
    from cuda.bindings import driver as drv
    from cuda.core import Device

    device = Device()
    device.set_current()
    stream = device.create_stream()

    def mem_info():
        err, free, total = drv.cuMemGetInfo()
        return free, total
"""


def test_cuda_core_default_memory_resource(run_client: Run) -> None:
    """Device.allocate: the stream-ordered pool (cuMemAllocFromPoolAsync). cuda.core raises the
    pool's release threshold, so the pool keeps what was freed until it is trimmed."""
    require("cuda-core")
    result = run_client(CUDA_CORE_SETUP + """
    def release(buffers):
        for b in buffers:
            b.close(stream)
        stream.sync()
        err, pool = drv.cuDeviceGetMemPool(drv.cuDeviceGet(0)[1])
        assert drv.cuMemPoolTrimTo(pool, 0)[0] == 0

    result = inside.exercise(lambda: device.allocate(inside.CHUNK, stream=stream), release,
                             mem_info)
    inside.report(resource=type(device.memory_resource).__name__, **result)
    """)
    assert result["resource"] == "DeviceMemoryResource"
    check_fill(result, "cuda.core._utils.cuda_utils.CUDAError", "CUDA_ERROR_OUT_OF_MEMORY")


def test_cuda_core_virtual_memory_resource(run_client: Run) -> None:
    """VirtualMemoryResource: cuMemCreate + cuMemMap, freed by unmap and release.

    cuda.core 1.2.2 never drops the reference cuMemCreate returns (NVIDIA/cuda-python#2882,
    measured on an H100: 64 x 64 MiB closed, 4096 MiB still held until the process exits).
    cgpu charges what the driver holds, so the first round shows the same. The second round
    drops that reference right after each allocation, as the upstream fix does, and then
    closing the buffers gives everything back.
    """
    require("cuda-core")
    result = run_client(CUDA_CORE_SETUP + """
    from cuda.core import VirtualMemoryResource

    vmr = VirtualMemoryResource(device)
    base = inside.ledger_used()  # the context
    leaked_round = [vmr.allocate(inside.CHUNK) for _ in range(4)]
    for b in leaked_round:
        b.close()
    leaked = inside.ledger_used()

    def allocate():
        buf = vmr.allocate(inside.CHUNK)
        err, handle = drv.cuMemRetainAllocationHandle(buf.handle)
        drv.cuMemRelease(handle)  # the reference just retained
        drv.cuMemRelease(handle)  # the reference cuMemCreate returned (cuda.core keeps it)
        return buf

    def release(buffers):
        for b in buffers:
            b.close()

    result = inside.exercise(allocate, release, mem_info)
    inside.report(base=base, leaked=leaked, **result)
    """)
    leaked = result["leaked"] - result["base"]
    assert leaked == 4 * CHUNK  # the upstream bug, as a real driver shows it
    assert result["ledger_before"] == result["leaked"]
    # The second round: the same contract, from what the first round left.
    check_fill(result, "cuda.core._utils.cuda_utils.CUDAError", "CUDA_ERROR_OUT_OF_MEMORY")
    assert result["free_after"] == SLICE - result["leaked"]


NUMBA_FILL = """
    import gc
    import inside
    import numpy as np
    from numba import cuda

    ctx = cuda.current_context()

    def release(arrays):
        arrays.clear()
        gc.collect()
        ctx.memory_manager.deallocations.clear()  # numba defers frees; flush them

    def mem_info():
        info = ctx.get_memory_info()
        return info.free, info.total

    # IPC is among the driver symbols the ctypes binding binds at import; use it once.
    probe = cuda.device_array(1 << 20, dtype=np.uint8)
    ipc = probe.get_ipc_handle()
    release([probe])
    del probe

    result = inside.exercise(lambda: cuda.device_array(inside.CHUNK, dtype=np.uint8), release,
                             mem_info)
    inside.report(implementation=cuda.implementation, ipc=type(ipc).__name__, **result)
"""


def test_numba_cuda(run_client: Run) -> None:
    """numba-cuda, NVIDIA's target, on cuda-bindings."""
    require("numba-cuda")
    result = run_client(NUMBA_FILL, numba_cuda=True)
    assert (result["implementation"], result["ipc"]) == ("NVIDIA", "IpcArrayHandle")
    check_fill(result, "numba.cuda.cudadrv.driver.CudaAPIError", "CUDA_ERROR_OUT_OF_MEMORY")


def test_numba_builtin_target_ctypes_binding(run_client: Run) -> None:
    """numba's own numba.cuda with its ctypes binding, which binds driver symbols at import."""
    require("numba")
    result = run_client(NUMBA_FILL, env={"NUMBA_CUDA_USE_NVIDIA_BINDING": "0"})
    assert (result["implementation"], result["ipc"]) == ("Built-in", "IpcArrayHandle")
    check_fill(result, "numba.cuda.cudadrv.driver.CudaAPIError", "CUDA_ERROR_OUT_OF_MEMORY")


def test_pycuda(run_client: Run) -> None:
    """pycuda built from its sdist; Context.detach() gives back what the context held."""
    require("pycuda")
    result = run_client("""
        import inside
        import pycuda.driver as drv

        drv.init()
        ctx = drv.Device(0).make_context()

        def release(buffers):
            for b in buffers:
                b.free()

        result = inside.exercise(lambda: drv.mem_alloc(inside.CHUNK), release, drv.mem_get_info)
        held = drv.mem_alloc(1 << 30)  # left for the context to take with it
        before_detach = inside.ledger_used()
        ctx.pop()
        ctx.detach()
        inside.report(before_detach=before_detach, after_detach=inside.ledger_used(), **result)
    """)
    check_fill(result, "pycuda._driver.MemoryError", "out of memory")
    assert result["before_detach"] >= 1 << 30
    assert result["after_detach"] == 0
