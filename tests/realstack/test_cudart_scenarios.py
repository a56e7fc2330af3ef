"""NVIDIA's CUDA runtime (libcudart 12.9 and 13, through ctypes) in scenarios beyond one
thread filling the slice: many threads at once, fork after start, an old driver, a device
reset, pinned memory, memory a pool keeps. Under `cgpu run --gpu-mem 4GiB`."""

from __future__ import annotations

import pytest
from realkit import SLICE, Runner, require
from test_cudart import runtime_dist

MiB = 1 << 20
PRELUDE = """
    import ctypes, inside, os, rt, threading
    cudart = rt.Cudart({major})
    L = cudart.lib
    B, S, V = ctypes.byref, ctypes.c_size_t, ctypes.c_void_p
"""


def script(major: int, body: str) -> str:
    """The body after the prelude that loads libcudart.<major>."""
    return PRELUDE.format(major=major) + body


@pytest.mark.parametrize("major", [12, 13])
def test_threads_allocating_at_once_stop_at_the_slice(run_real: Runner, major: int) -> None:
    """16 threads race cudaMalloc of 8 MiB blocks; together they hold no more than the slice."""
    require(runtime_dist(major))
    result = run_real(
        script(
            major,
            """
    held, errors, lock = [], set(), threading.Lock()
    barrier = threading.Barrier(16)
    def work():
        mine = []
        for _ in range(64):
            p = V()
            rc = L.cudaMalloc(B(p), S(8 << 20))
            if rc:
                with lock:
                    errors.add(rc)
            else:
                mine.append(p.value)
        with lock:
            held.extend(mine)
        barrier.wait()
    threads = [threading.Thread(target=work) for _ in range(16)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    ledger = inside.ledger_used()
    for p in held:
        assert L.cudaFree(V(p)) == 0
    inside.report(blocks=len(held), errors=sorted(errors), ledger=ledger,
                  after=inside.ledger_used(), free=cudart.mem_get_info()[0])
    """,
        )
    )
    assert result["errors"] == [2], result  # cudaErrorMemoryAllocation, nothing else
    assert SLICE - 64 * MiB < result["blocks"] * 8 * MiB <= SLICE, result
    assert result["ledger"] <= SLICE, result
    assert result["after"] < result["ledger"] - (SLICE - 64 * MiB), result


@pytest.mark.parametrize("major", [12, 13])
def test_a_forked_child_gets_an_initialization_error(run_real: Runner, major: int) -> None:
    """As on a real GPU, a child forked after the runtime started cannot use it."""
    require(runtime_dist(major))
    result = run_real(
        script(
            major,
            """
    p = V()
    assert L.cudaMalloc(B(p), S(1 << 20)) == 0
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        q = V()
        os.write(w, str(L.cudaMalloc(B(q), S(1 << 20))).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = int(os.read(r, 16))
    inside.report(child=child, parent=L.cudaFree(p))
    """,
        )
    )
    assert result == {"child": 3, "parent": 0}  # cudaErrorInitializationError in the child


@pytest.mark.parametrize(("major", "expect"), [(12, 0), (13, 35)])
def test_an_old_driver(run_real: Runner, major: int, expect: int) -> None:
    """A CUDA 12.2 driver: libcudart 12 runs on it, libcudart 13 refuses it with
    cudaErrorInsufficientDriver (35), as it does on a real driver."""
    require(runtime_dist(major))
    result = run_real(
        script(
            major,
            """
    n = ctypes.c_int()
    rc = L.cudaGetDeviceCount(B(n))
    total = cudart.mem_get_info()[1] if rc == 0 else 0
    inside.report(rc=rc, count=n.value, total=total)
    """,
        ),
        env={"CGPU_SIM_DRIVER_VERSION": "12020"},
    )
    assert result["rc"] == expect, result
    if expect == 0:
        assert result["count"] == 1 and result["total"] == SLICE, result


@pytest.mark.parametrize("major", [12, 13])
def test_reset_then_reuse_and_pinned_round_trip(run_real: Runner, major: int) -> None:
    """cudaDeviceReset gives the slice back; the device works after it; bytes go through
    pinned host memory and an async copy on a stream."""
    require(runtime_dist(major))
    result = run_real(
        script(
            major,
            """
    p = V()
    assert L.cudaMalloc(B(p), S(3 << 30)) == 0
    held = inside.ledger_used()
    assert L.cudaDeviceReset() == 0
    after_reset = inside.ledger_used()
    n = 1 << 20
    h, d, s = V(), V(), V()
    assert L.cudaMallocHost(B(h), S(n)) == 0
    assert L.cudaMalloc(B(d), S(3 << 30)) == 0
    ctypes.memmove(h, bytes(range(256)) * (n // 256), n)
    assert L.cudaMemcpy(d, h, S(n), 1) == 0
    ctypes.memset(h, 0, n)
    assert L.cudaStreamCreate(B(s)) == 0
    assert L.cudaMemcpyAsync(h, d, S(n), 2, s) == 0
    assert L.cudaStreamSynchronize(s) == 0
    same = ctypes.string_at(h, n) == bytes(range(256)) * (n // 256)
    inside.report(held=held, after_reset=after_reset, same=same,
                  freehost=L.cudaFreeHost(h), free=L.cudaFree(d))
    """,
        )
    )
    assert result["held"] >= 3 << 30, result
    assert result["after_reset"] < 64 * MiB, result
    assert result["same"] and result["freehost"] == 0 and result["free"] == 0, result


@pytest.mark.parametrize("major", [12, 13])
def test_memory_a_pool_keeps_stays_charged(run_real: Runner, major: int) -> None:
    """With the release threshold at the maximum (as PyTorch's cudaMallocAsync backend sets
    it), 3 GiB freed into the pool stay the pool's: the slice shows them used and a plain
    cudaMalloc of 3 GiB fails, until cudaMemPoolTrimTo gives them back."""
    require(runtime_dist(major))
    result = run_real(
        script(
            major,
            """
    pool = V()
    assert L.cudaDeviceGetDefaultMemPool(B(pool), 0) == 0
    assert L.cudaMemPoolSetAttribute(pool, 4, B(ctypes.c_uint64(2**64 - 1))) == 0
    ptrs = [V() for _ in range(3)]
    for p in ptrs:
        assert L.cudaMallocAsync(B(p), S(1 << 30), None) == 0
    for p in ptrs:
        assert L.cudaFreeAsync(p, None) == 0
    assert L.cudaStreamSynchronize(None) == 0
    kept_free = cudart.mem_get_info()[0]
    q = V()
    plain = L.cudaMalloc(B(q), S(3 << 30))
    L.cudaGetLastError()
    reused = L.cudaMallocAsync(B(q), S(3 << 30), None)  # the pool's own memory serves it
    assert L.cudaFreeAsync(q, None) == 0
    assert L.cudaMemPoolTrimTo(pool, S(0)) == 0
    trimmed_free = cudart.mem_get_info()[0]
    inside.report(kept_free=kept_free, plain=plain, reused=reused, trimmed_free=trimmed_free,
                  ledger=inside.ledger_used())
    """,
        )
    )
    assert result["kept_free"] < SLICE - (3 << 30), result
    assert result["plain"] == 2, result  # cudaErrorMemoryAllocation
    assert result["reused"] == 0, result
    assert result["trimmed_free"] > SLICE - 64 * MiB, result
    assert result["ledger"] < 64 * MiB, result
