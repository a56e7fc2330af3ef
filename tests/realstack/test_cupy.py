"""CuPy (cupy-cuda12x on libcudart 12.9) on the simulator under a 4 GiB slice: its memory
pool stops within one chunk of the slice with its own OutOfMemoryError, and gives everything
back; its runtime sees the slice; bytes survive a round trip."""

from __future__ import annotations

import pytest
from realkit import CHUNK, SLICE, Runner, require

POOLS = {
    "memory_pool": "cupy.get_default_memory_pool()",
    "async_pool": "cupy.cuda.MemoryAsyncPool(); cupy.cuda.set_allocator(pool.malloc)",
}


@pytest.mark.parametrize("pool", POOLS.values(), ids=list(POOLS))
def test_cupy_pool_stops_at_the_slice(run_real: Runner, pool: str) -> None:
    """CuPy's default pool (cudaMalloc) and its stream-ordered one (cudaMallocAsync)."""
    require("cupy-cuda12x")
    require("nvidia-cuda-runtime-cu12")
    result = run_real(f"""
        import cupy, inside
        pool = {pool}

        def allocate():
            return cupy.empty(inside.CHUNK, dtype=cupy.uint8)

        def release(held):
            held.clear()
            cupy.cuda.Device().synchronize()
            pool.free_all_blocks()

        result = inside.exercise(allocate, release, cupy.cuda.runtime.memGetInfo)
        inside.report(runtime=cupy.cuda.runtime.runtimeGetVersion(), **result)
    """)
    assert result["runtime"] // 1000 == 12
    assert result["total"] == SLICE
    assert result["error"]["type"] == "cupy.cuda.memory.OutOfMemoryError", result["error"]
    assert "Out of memory allocating" in result["error"]["message"], result["error"]
    assert SLICE - CHUNK < result["allocated"] + result["ledger_before"] <= SLICE, result
    assert result["free_full"] < CHUNK, result
    assert result["ledger_after"] == result["ledger_before"], result
    assert result["free_after"] == result["free_before"], result


def test_cupy_bytes_survive_a_round_trip(run_real: Runner) -> None:
    require("cupy-cuda12x")
    result = run_real("""
        import cupy, numpy, inside
        host = numpy.random.default_rng(7).integers(0, 2**63, 1 << 20, dtype=numpy.uint64)
        dev = cupy.asarray(host)
        twin = cupy.empty_like(dev)
        twin.data.copy_from_device(dev.data, dev.nbytes)   # device to device
        inside.report(back=bool((twin.get() == host).all()))
    """)
    assert result == {"back": True}
