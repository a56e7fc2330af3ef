"""NVML through a dlopen'd handle shows the slice: what nvidia-smi in the container prints."""

from __future__ import annotations

import subprocess
import sys

GiB = 1 << 30
MiB = 1 << 20


def test_nvml_memory_info_shows_the_slice_and_the_container_use(shim_env, probe, native_build):
    env = shim_env({"CGPU_MEM_LIMIT": "2GiB"})
    holder = subprocess.Popen(
        [
            str(native_build / "cuda_probe"),
            "dlsym",
            "init",
            "alloc",
            str(512 * MiB),
            "ready",
            "wait",
        ],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    for _ in range(3):
        holder.stdout.readline()
    # A second process that only uses NVML (as nvidia-smi does) sees the shared use.
    r = probe(env, "dlsym", "nvml")
    rc1, total1, used1, free1, rc2, total2, used2, free2 = map(int, r.one("nvml"))
    holder.communicate("", timeout=30)
    assert (rc1, total1, used1, free1) == (0, 2 * GiB, 512 * MiB, 2 * GiB - 512 * MiB)
    assert (rc2, total2, used2, free2) == (0, 2 * GiB, 512 * MiB, 2 * GiB - 512 * MiB)


def test_nvml_without_a_limit_is_untouched(shim_env, probe):
    r = probe(shim_env(), "dlsym", "nvml")
    assert r.one("nvml")[1] == str(16 * GiB)


def test_pynvml_through_cgpu_run_sees_the_slice(sim_env, tmp_path):
    env = sim_env()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cgpu.cli",
            "run",
            "--simulate",
            "--state-dir",
            str(tmp_path),
            "--gpu-mem",
            "3GiB",
            "--",
            sys.executable,
            "-m",
            "cgpu.cli",
            "smi",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "Memory-Usage: 0MiB / 3072MiB" in out.stdout
