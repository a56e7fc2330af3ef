"""Every allocation family is charged, and every matching free credits it."""

from __future__ import annotations

import subprocess

import pytest

from cgpu.core.ledger import read_ledger

GiB = 1 << 30
MiB = 1 << 20


def test_each_family_stops_at_the_slice_and_returns_to_zero(shim_env, probe, ledger_dir):
    env = shim_env({"CGPU_MEM_LIMIT": "256MiB"})
    r = probe(
        env,
        "dlsym",
        "init",
        "pitch",
        1 << 16,
        3000,  # ~188 MiB: fits
        "pitch",
        1 << 16,
        5000,  # ~313 MiB: over
        "vmm",
        128 * MiB,
        "vmm",
        512 * MiB,
        "async",
        128 * MiB,
        "async",
        512 * MiB,
        "pool",
        128 * MiB,
        "pool",
        512 * MiB,
        "array",
        4096,
        4096,
        "array",
        8192,
        4096,  # float4: 256 MiB fits, 512 MiB not
        "array3d",
        512,
        512,
        512,
        "array3d",
        1024,
        1024,
        512,  # u8: 128 MiB fits, 512 MiB not
        "mipmap",
        4096,
        2048,
        4,
        "mipmap",
        16384,
        8192,
        1,
        "managed",
        200 * MiB,
        "managed",
        200 * MiB,
        "free-all",
    )
    assert r.returncode == 0, r.stderr
    for family in ("pitch", "vmm", "async", "pool", "array", "array3d", "mipmap", "managed"):
        assert [line[0] for line in r.lines(family)] == ["0", "2"], (family, r.stdout)
    for release in (
        "pitch-free",
        "vmm-release",
        "async-free",
        "pool-free",
        "array-destroy",
        "array3d-destroy",
        "mipmap-destroy",
    ):
        assert r.one(release) == ["0"], release
    snap = read_ledger(ledger_dir / "cgpu.ledger")
    assert snap.devices[0].used == 0
    assert snap.devices[0].peak > 200 * MiB


def test_vmm_memory_not_on_the_device_is_not_charged(shim_env, probe):
    env = shim_env({"CGPU_MEM_LIMIT": "64MiB"})
    r = probe(env, "dlsym", "init", "vmm-cpu", 512 * MiB, "vmm", 512 * MiB)
    assert r.one("vmm-cpu") == ["0"]
    assert r.one("vmm") == ["2"]


def test_vmm_takes_the_device_from_the_allocation_not_the_thread(shim_env, probe):
    """cuMemCreate works with no current context (PyTorch expandable segments' worker threads)."""
    env = shim_env({"CGPU_MEM_LIMIT": "64MiB"})
    # No "init": cuInit only, through the vmm path, and no context is made current.
    r = probe(env, "dlsym", "vmm-hold", 32 * MiB)
    assert r.one("vmm-hold")[0] in {"3", "0"}  # simulator may need cuInit; never over the slice
    r = probe(env, "gpa2", "init", "vmm-hold", 48 * MiB, "vmm-hold", 48 * MiB)
    assert [line[0] for line in r.lines("vmm-hold")] == ["0", "2"]


def test_granularity_is_charged(shim_env, probe, ledger_dir):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    r = probe(env, "dlsym", "init", "alloc", 1, "alloc", 3 * MiB, "wait", "free-all")
    assert r.returncode == 0
    # After the process ended its slot is reclaimed; peak shows what was charged.
    snap = read_ledger(ledger_dir / "cgpu.ledger")
    assert snap.devices[0].peak == 512 + 4 * MiB
    assert snap.devices[0].used == 0


def test_free_of_unknown_pointer_reaches_the_driver(shim_env, probe):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    r = probe(env, "dlsym", "init", "free-bogus")
    assert r.one("free-bogus") == ["1"]  # CUDA_ERROR_INVALID_VALUE from the driver itself


def test_memory_freed_with_its_context_is_credited(shim_env, probe, ledger_dir):
    """cudaDeviceReset and cuCtxDestroy free what the context held; the slice must see it."""
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"}, ctx_overhead="64MiB")
    r = probe(
        env,
        "gpa2",
        "init",
        "alloc",
        800 * MiB,
        "reset",
        "info",
        "alloc",
        800 * MiB,
        "ctx-alloc-destroy",
        100 * MiB,
        "info",
        "free-all",
    )
    assert r.returncode == 0, r.stderr
    assert r.one("reset") == ["0"] and r.one("reinit") == ["0"]
    # After the reset only the new context's overhead is charged.
    assert r.lines("info")[0] == ["0", str(GiB - 64 * MiB), str(GiB)]
    assert [line[0] for line in r.lines("alloc")] == ["0", "0"]
    assert r.one("ctx-alloc") == ["0"] and r.one("ctx-destroy") == ["0"]
    assert r.lines("info")[1] == ["0", str(GiB - 64 * MiB - 800 * MiB), str(GiB)]
    assert read_ledger(ledger_dir / "cgpu.ledger").devices[0].used == 0


def test_context_overhead_stays_while_any_context_lives(shim_env, probe):
    """Overhead charged with the device's first context is returned with its last."""
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"}, ctx_overhead="64MiB")
    # A second context is created and destroyed while the primary lives: still charged.
    r = probe(env, "dlsym", "init", "ctx-alloc-destroy", MiB, "info", "reset", "info")
    assert r.returncode == 0, r.stderr
    infos = r.lines("info")
    assert infos[0] == ["0", str(GiB - 64 * MiB), str(GiB)]
    assert infos[1] == ["0", str(GiB - 64 * MiB), str(GiB)]  # the re-made primary's overhead


@pytest.mark.parametrize("start", ["init", "init-own"])  # the primary, a context of its own
def test_a_context_that_does_not_fit_is_refused(shim_env, probe, native_build, ledger_dir, start):
    """A context takes memory like any allocation: a process starting CUDA in a slice too
    full for its context overhead gets CUDA_ERROR_OUT_OF_MEMORY, as on a full GPU, and
    the slice never goes over (seen on an H100: two PyTorch processes in a 4 GiB slice
    held 4,108 MiB by NVML while the second context was charged past the limit)."""
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"}, ctx_overhead="64MiB")
    hold = ["dlsym", "init", "alloc", str(928 * MiB), "ready", "wait"]
    holder = subprocess.Popen(
        [str(native_build / "cuda_probe"), *hold],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        started = [holder.stdout.readline().strip() for _ in range(3)]
        assert started == ["init 0", "alloc 0", "ready"]
        # 64 + 928 MiB held: 32 MiB left, less than a context takes.
        refused = probe(env, "dlsym", start)
        assert refused.returncode == 3 and refused.one(start) == ["2"], refused.stderr
        assert "out of GPU memory slice" in refused.stderr
        assert read_ledger(ledger_dir / "cgpu.ledger").devices[0].used == 992 * MiB
        holder.stdin.close()
        assert holder.wait(60) == 0
    finally:
        holder.kill()
        holder.wait(60)
    # With room again, the same start succeeds and is charged its overhead.
    r = probe(env, "dlsym", start, "info", "alloc", 960 * MiB, "alloc", 2 * MiB)
    assert r.one(start) == ["0"] and r.one("info") == ["0", str(GiB - 64 * MiB), str(GiB)]
    assert [line[0] for line in r.lines("alloc")] == ["0", "2"]


def test_vmm_memory_is_charged_until_released_and_unmapped(shim_env, probe, ledger_dir):
    """NCCL releases a handle right after mapping it: the memory lives until the unmap."""
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    r = probe(env, "gpa2", "init", "vmm-map-release", 512 * MiB, "info")
    assert r.returncode == 0, r.stderr
    assert r.one("vmm-mapped") == ["0"] and r.one("vmm-unmap") == ["0"]
    infos = r.lines("info")
    assert infos[0] == ["0", str(GiB - 512 * MiB), str(GiB)]  # released but still mapped
    assert infos[1] == ["0", str(GiB), str(GiB)]  # unmapped: gone


def test_pool_allocations_are_charged_to_the_pools_device(shim_env, probe):
    """With GPU 0's context current, allocating from GPU 1's pool charges GPU 1."""
    uuids = "GPU-aaaaaaaa-0000-4000-8000-000000000001,GPU-bbbbbbbb-0000-4000-8000-000000000002"
    env = shim_env({"CGPU_MEM_LIMIT_0": "4GiB", "CGPU_MEM_LIMIT_1": "1GiB"}, devices=2, uuids=uuids)
    r = probe(env, "dlsym", "init", "pool-fill", 1, 256 * MiB, "info")
    assert r.one("pool-fill") == ["4", "2"]
    assert r.one("info") == ["0", str(4 * GiB), str(4 * GiB)]  # GPU 0 untouched
