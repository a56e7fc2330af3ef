"""The slice holds however a program finds the driver's functions."""

from __future__ import annotations

import pytest

from cgpu.core.ledger import read_ledger

GiB = 1 << 30
MiB = 1 << 20
RESOLUTIONS = ["direct", "dlsym", "default", "next", "gpa1", "gpa2"]


@pytest.mark.parametrize("resolution", RESOLUTIONS)
def test_every_resolution_path_is_limited(shim_env, probe, ledger_dir, resolution):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    r = probe(
        env, resolution, "init", "info", "total", "fill", 64 * MiB, "info", "free-all", "info"
    )
    assert r.returncode == 0, r.stderr
    infos = r.lines("info")
    assert infos[0] == ["0", str(GiB), str(GiB)]  # free, total = the slice
    assert r.one("total") == ["0", str(GiB)]  # cuDeviceTotalMem = the slice
    assert r.one("fill") == ["16", "2"]  # 16 x 64 MiB, then CUDA_ERROR_OUT_OF_MEMORY
    assert infos[1] == ["0", "0", str(GiB)]
    assert infos[2] == ["0", str(GiB), str(GiB)]
    assert "out of GPU memory slice" in r.stderr
    assert [d.used for d in read_ledger(ledger_dir / "cgpu.ledger").devices] == [0]


@pytest.mark.parametrize("resolution", RESOLUTIONS)
def test_stream_ordered_allocations_are_limited_on_every_path(shim_env, probe, resolution):
    # gpa2 asks for per-thread-stream variants, so this also covers cuMemAllocAsync_ptsz.
    env = shim_env({"CGPU_MEM_LIMIT": "256MiB"})
    r = probe(
        env,
        resolution,
        "init",
        "async",
        200 * MiB,
        "async",
        300 * MiB,
        "pool",
        200 * MiB,
        "pool",
        300 * MiB,
    )
    assert [line[0] for line in r.lines("async")] == ["0", "2"]
    assert [line[0] for line in r.lines("pool")] == ["0", "2"]


def test_unrelated_rtld_next_users_keep_working(shim_env, probe, native_build):
    """Another preloaded library's dlsym(RTLD_NEXT, "getpid") must find libc, not itself."""
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    env["LD_PRELOAD"] += f":{native_build / 'libnext_user.so'}"
    r = probe(env, "dlsym", "init", "alloc", MiB, "free-all")
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert r.one("free-all") == ["1", "0"]


def test_get_export_table_never_initialises_the_shim(shim_env, probe, sim_env):
    """cudart calls cuGetExportTable first; HAMi-core hung there. We must not even look."""
    bare = probe(sim_env(), "dlsym", "export-table").one("export-table")
    # A malformed limit would make initialisation print and fail: it must not happen here.
    r = probe(shim_env({"CGPU_MEM_LIMIT": "malformed"}), "dlsym", "export-table")
    assert r.one("export-table") == bare
    assert r.stderr == ""


def test_cuda_python_client_is_limited(sim_env, tmp_path):
    """cuda-python resolves the driver through cuGetProcAddress, as cudart does."""
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "fill_gpu.py"
    cgpu = Path(sys.executable).parent / "cgpu"
    out = subprocess.run(
        [
            str(cgpu),
            "run",
            "--simulate",
            "--gpu-mem",
            "4GiB",
            "--state-dir",
            str(tmp_path),
            "--",
            sys.executable,
            str(example),
            "--chunk-mib",
            "512",
        ],
        env=sim_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "cuMemGetInfo: free 4096 MiB of 4096 MiB" in out.stdout
    assert "allocated 8 x 512 MiB" in out.stdout
    assert "CUDA_ERROR_OUT_OF_MEMORY" in out.stdout
