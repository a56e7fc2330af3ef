"""NVIDIA's CUDA runtime itself (libcudart 12.9 and 13, through ctypes) under a 4 GiB slice:
cudaMemGetInfo shows the slice, cudaMalloc and cudaMallocAsync stop within one chunk of it
with cudaErrorMemoryAllocation, and freeing gives everything back."""

from __future__ import annotations

import pytest
from realkit import CHUNK, SIM_MEMORY, SLICE, Runner, require

SCRIPT = """
    import inside, rt
    cudart = rt.Cudart({major})

    def allocate():
        rc, ptr = cudart.{malloc}(inside.CHUNK)
        if rc:
            raise rt.CudaError(cudart.error(rc))
        return ptr

    def release(ptrs):
        for p in ptrs:
            assert cudart.{free}(p) == 0

    result = inside.exercise(allocate, release, cudart.mem_get_info)
    inside.report(version=cudart.version(), **result)
"""


def runtime_dist(major: int) -> str:
    """The pinned distribution that brings libcudart.so.<major>."""
    return "nvidia-cuda-runtime-cu12" if major == 12 else "torch"


@pytest.mark.parametrize("major", [12, 13])
@pytest.mark.parametrize(("malloc", "free"), [("malloc", "free"), ("malloc_async", "free_async")])
def test_cudart_stops_at_the_slice(run_real: Runner, major: int, malloc: str, free: str) -> None:
    require(runtime_dist(major))
    result = run_real(SCRIPT.format(major=major, malloc=malloc, free=free))
    assert result["version"] // 1000 == major
    assert result["total"] == SLICE
    assert result["error"]["type"] == "rt.CudaError", result["error"]
    assert "cudaErrorMemoryAllocation (2)" in result["error"]["message"], result["error"]
    assert SLICE - CHUNK < result["allocated"] + result["ledger_before"] <= SLICE, result
    assert result["free_full"] < CHUNK, result
    assert result["ledger_after"] == result["ledger_before"], result
    assert result["free_after"] == result["free_before"], result


@pytest.mark.parametrize("major", [12, 13])
def test_cudart_without_the_shim_sees_the_whole_gpu(run_real: Runner, major: int) -> None:
    require(runtime_dist(major))
    result = run_real(
        f"""
        import inside, rt
        free, total = rt.Cudart({major}).mem_get_info()
        inside.report(free=free, total=total)
        """,
        shim=False,
    )
    assert result["total"] == SIM_MEMORY
    assert SIM_MEMORY - (64 << 20) <= result["free"] <= SIM_MEMORY


ENTRY_POINT = {
    "by_version": """cudart.lib.cudaGetDriverEntryPointByVersion(
            b"cuMemAlloc", ctypes.byref(fn), ctypes.c_uint(12000), ctypes.c_ulonglong(0),
            ctypes.byref(status))""",
    # CUDA 12 only (removed in 13): the newest variant for the runtime's own version.
    "plain": """cudart.lib.cudaGetDriverEntryPoint(
            b"cuMemAlloc", ctypes.byref(fn), ctypes.c_ulonglong(0), ctypes.byref(status))""",
}


@pytest.mark.parametrize(("major", "call"), [(12, "by_version"), (13, "by_version"), (12, "plain")])
def test_driver_entry_points_from_the_runtime_are_limited(
    run_real: Runner, major: int, call: str
) -> None:
    """cudaGetDriverEntryPoint(ByVersion), what PyTorch's expandable segments use, hands out
    driver functions that the slice holds."""
    require(runtime_dist(major))
    result = run_real(f"""
        import ctypes, inside, rt
        cudart = rt.Cudart({major})
        cudart.mem_get_info()                      # the runtime's context
        fn, status = ctypes.c_void_p(), ctypes.c_int(-1)
        rc = {ENTRY_POINT[call]}
        assert rc == 0 and status.value == 0 and fn.value, (rc, status.value)
        mem_alloc = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_ulonglong),
                                     ctypes.c_size_t)(fn.value)
        ptr = ctypes.c_ulonglong()
        first = mem_alloc(ctypes.byref(ptr), 3 << 30)
        ledger = inside.ledger_used()
        second = mem_alloc(ctypes.byref(ptr), 2 << 30)
        inside.report(first=first, second=second, ledger=ledger)
    """)
    assert result["first"] == 0
    assert result["second"] == 2, result  # CUDA_ERROR_OUT_OF_MEMORY
    assert (3 << 30) <= result["ledger"] <= SLICE, result
