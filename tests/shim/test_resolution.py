"""The slice holds however a program finds the driver's functions."""

from __future__ import annotations

import pytest

from cgpu.ledger import read_ledger

GiB = 1 << 30
MiB = 1 << 20
RESOLUTIONS = ["direct", "dlsym", "default", "next", "gpa1", "gpa2"]


@pytest.mark.parametrize("resolution", RESOLUTIONS)
def test_every_resolution_path_is_limited(shim_env, probe, ledger_dir, resolution):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    r = probe(env, resolution, "init", "info", "total", "fill", 64 * MiB, "info", "free-all", "info")
    assert r.returncode == 0, r.stderr
    infos = r.lines("info")
    assert infos[0] == ["0", str(GiB), str(GiB)]          # free, total = the slice
    assert r.one("total") == ["0", str(GiB)]              # cuDeviceTotalMem = the slice
    assert r.one("fill") == ["16", "2"]                   # 16 x 64 MiB, then CUDA_ERROR_OUT_OF_MEMORY
    assert infos[1] == ["0", "0", str(GiB)]
    assert infos[2] == ["0", str(GiB), str(GiB)]
    assert "out of GPU memory slice" in r.stderr
    assert [d.used for d in read_ledger(ledger_dir / "cgpu.ledger").devices] == [0]


@pytest.mark.parametrize("resolution", RESOLUTIONS)
def test_stream_ordered_allocations_are_limited_on_every_path(shim_env, probe, resolution):
    # gpa2 asks for per-thread-stream variants, so this also covers cuMemAllocAsync_ptsz.
    env = shim_env({"CGPU_MEM_LIMIT": "256MiB"})
    r = probe(env, resolution, "init", "async", 200 * MiB, "async", 300 * MiB, "pool", 200 * MiB,
              "pool", 300 * MiB)
    assert [line[0] for line in r.lines("async")] == ["0", "2"]
    assert [line[0] for line in r.lines("pool")] == ["0", "2"]


def test_unrelated_rtld_next_users_keep_working(shim_env, probe, native_build):
    """Another preloaded library's dlsym(RTLD_NEXT, "getpid") must find libc, not itself."""
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    env["LD_PRELOAD"] += f":{native_build / 'libnext_user.so'}"
    r = probe(env, "dlsym", "init", "alloc", MiB, "free-all")
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert r.one("free-all") == ["1", "0"]
