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
