"""Memory freed into a pool stays reserved by it, as on the driver: the device's free memory
does not come back until a synchronizing call trims the pool to its release threshold, or
cuMemPoolTrimTo or a reset releases it. PyTorch's cudaMallocAsync backend sets the threshold
to the maximum, so its pool keeps what it freed."""

from __future__ import annotations

from pathlib import Path

from simkit import PRIMARY_CONTEXT, GiB, MiB, json_out, run_py

PROBE = PRIMARY_CONTEXT + """
B, U64 = ctypes.byref, ctypes.c_uint64
def free():
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    ok(cu.cuMemGetInfo_v2(B(f), B(t)))
    return f.value
pool = ctypes.c_void_p()
ok(cu.cuDeviceGetDefaultMemPool(B(pool), 0))
ok(cu.cuMemPoolSetAttribute(pool, 4, B(U64({threshold}))))  # RELEASE_THRESHOLD
out = {{"before": free()}}
ptrs = [U64() for _ in range(3)]
for p in ptrs:
    ok(cu.cuMemAllocAsync(B(p), ctypes.c_size_t(256 << 20), None))
for p in ptrs:
    ok(cu.cuMemFreeAsync(p, None))
out["freed"] = free()
reserved = U64()
ok(cu.cuMemPoolGetAttribute(pool, 0x5, B(reserved)))  # RESERVED_MEM_CURRENT
out["reserved"] = reserved.value
ok(cu.cuStreamSynchronize(None))
out["synced"] = free()
p = U64()
out["plain"] = cu.cuMemAlloc_v2(B(p), ctypes.c_size_t(900 << 20))
if out["plain"] == 0:
    ok(cu.cuMemFree_v2(p))
ok(cu.cuMemAllocAsync(B(p), ctypes.c_size_t(256 << 20), None))  # reuses what the pool keeps
out["reused"] = free()
ok(cu.cuMemFreeAsync(p, None))
ok(cu.cuMemPoolTrimTo(pool, ctypes.c_size_t(0)))
out["trimmed"] = free()
print(json.dumps(out))
"""


def probe(simlib: Path, threshold: int) -> dict:
    proc = run_py(simlib, PROBE.format(threshold=threshold), memory="1GiB")
    assert proc.returncode == 0, proc.stderr
    return json_out(proc)


def test_a_pool_keeps_what_it_freed_until_trimmed(simlib: Path) -> None:
    r = probe(simlib, 2**64 - 1)
    assert r["before"] == GiB
    assert r["freed"] == GiB - 768 * MiB  # freed, yet still the pool's
    assert r["reserved"] == 768 * MiB
    assert r["synced"] == GiB - 768 * MiB  # below the threshold: kept across a sync
    assert r["plain"] == 2  # CUDA_ERROR_OUT_OF_MEMORY: the pool holds the memory
    assert r["reused"] == GiB - 768 * MiB  # the pool's own memory served it
    assert r["trimmed"] == GiB


def test_a_pool_with_threshold_zero_gives_back_at_a_sync(simlib: Path) -> None:
    r = probe(simlib, 0)
    assert r["freed"] == GiB - 768 * MiB  # not before a synchronizing call
    assert r["synced"] == GiB
    assert r["plain"] == 0
    assert r["reused"] == GiB - 256 * MiB
    assert r["trimmed"] == GiB
