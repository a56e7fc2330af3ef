"""NVIDIA's CUDA runtime under a 4 GiB slice: device memory the driver reserves off the
allocation calls is charged when the runtime asks for it (cudaDeviceSetLimit's heaps, the graph
memory of a captured cudaMallocAsync), through the driver functions the runtime resolves with
cuGetProcAddress."""

from __future__ import annotations

import pytest
from realkit import Runner, require
from test_cudart import runtime_dist

MiB = 1 << 20


@pytest.mark.parametrize("major", [12, 13])
def test_cudart_heaps_are_charged_and_held_to_the_slice(run_real: Runner, major: int) -> None:
    require(runtime_dist(major))
    result = run_real(f"""
        import ctypes, inside, rt
        cudart = rt.Cudart({major})
        cudart.mem_get_info()                                   # the runtime's context
        before = inside.ledger_used()
        heap = cudart.lib.cudaDeviceSetLimit(2, ctypes.c_size_t(520 << 20))   # malloc heap
        after = inside.ledger_used()
        over = cudart.lib.cudaDeviceSetLimit(2, ctypes.c_size_t(8 << 30))     # past the slice
        kept = ctypes.c_size_t()
        cudart.lib.cudaDeviceGetLimit(ctypes.byref(kept), 2)
        back = cudart.lib.cudaDeviceSetLimit(2, ctypes.c_size_t(8 << 20))
        inside.report(heap=heap, over=over, kept=kept.value, back=back,
                      charged=after - before, left=inside.ledger_used() - before)
    """)
    assert result["heap"] == 0 and result["back"] == 0, result
    assert result["over"] == 2, result  # cudaErrorMemoryAllocation
    assert result["kept"] == 520 * MiB, result
    assert result["charged"] == 512 * MiB, result  # beyond the default 8 MiB
    assert result["left"] == 0, result


@pytest.mark.parametrize("major", [12, 13])
def test_cudart_graph_memory_is_charged_at_instantiation(run_real: Runner, major: int) -> None:
    require(runtime_dist(major))
    result = run_real(f"""
        import ctypes, inside, rt
        cudart = rt.Cudart({major})
        lib = cudart.lib
        cudart.mem_get_info()
        stream, graph, exe, ptr = (ctypes.c_void_p() for _ in range(4))
        assert lib.cudaStreamCreateWithFlags(ctypes.byref(stream), 1) == 0
        before = inside.ledger_used()
        assert lib.cudaStreamBeginCapture(stream, 2) == 0                     # relaxed
        alloc = lib.cudaMallocAsync(ctypes.byref(ptr), ctypes.c_size_t(300 << 20), stream)
        captured = inside.ledger_used() - before
        assert lib.cudaStreamEndCapture(stream, ctypes.byref(graph)) == 0
        inst = lib.cudaGraphInstantiate(ctypes.byref(exe), graph, ctypes.c_ulonglong(0))
        instantiated = inside.ledger_used() - before
        launch = lib.cudaGraphLaunch(exe, stream) or lib.cudaStreamSynchronize(stream)
        freed = lib.cudaFreeAsync(ptr, stream) or lib.cudaStreamSynchronize(stream)
        destroy = lib.cudaGraphExecDestroy(exe)
        trim = lib.cudaDeviceGraphMemTrim(0)
        inside.report(alloc=alloc, captured=captured, inst=inst, instantiated=instantiated,
                      launch=launch, freed=freed, destroy=destroy, trim=trim,
                      left=inside.ledger_used() - before)
    """)
    assert result["alloc"] == 0 and result["inst"] == 0 and result["launch"] == 0, result
    assert result["captured"] == 0, result  # an allocation node: nothing allocated yet
    assert result["instantiated"] == 300 * MiB, result
    assert result["freed"] == 0 and result["destroy"] == 0 and result["trim"] == 0, result
    assert result["left"] == 0, result
