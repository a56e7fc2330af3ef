"""`cgpu shim-path`, `cgpu run` and `cgpu ledger` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

MiB = 1 << 20


def cgpu(*args, env=None, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "cgpu.cli", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def cgpu_run(state_dir, *command, env, gpu_mem="1GiB", options=()):
    """`cgpu run --simulate --gpu-mem SIZE --state-dir DIR [OPTIONS] -- COMMAND`."""
    return cgpu("run", "--simulate", "--gpu-mem", gpu_mem, "--state-dir", state_dir, *options,
                "--", *command, env=env)  # fmt: skip


def test_shim_path_prints_the_installed_shim():
    out = cgpu("shim-path")
    assert out.returncode == 0
    path = Path(out.stdout.strip())
    assert path.is_absolute() and path.is_file() and path.name == "libcgpu.so"


def test_run_limits_the_command_and_cleans_up(sim_env, native_build, tmp_path):
    probe = native_build / "cuda_probe"
    out = cgpu_run(tmp_path, probe, "dlsym", "init", "fill", 64 * MiB, env=sim_env())
    assert out.returncode == 0, out.stderr
    assert "fill 16 2" in out.stdout
    assert list((tmp_path / "containers").iterdir()) == []


def test_run_passes_the_exit_status_through(sim_env, tmp_path):
    out = cgpu_run(tmp_path, sys.executable, "-c", "raise SystemExit(7)", env=sim_env())
    assert out.returncode == 7


def test_run_simulate_names_the_simulator_to_its_loaders(sim_env, tmp_path):
    """The simulator's folder comes first on the library path, and Triton (torch.compile) is
    told to link against it rather than the first libcuda.so.1 ldconfig knows."""
    show = "import os; print(os.environ['LD_LIBRARY_PATH'], os.environ['TRITON_LIBCUDA_PATH'])"
    out = cgpu_run(tmp_path, sys.executable, "-c", show, env=sim_env())
    assert out.returncode == 0, out.stderr
    ld_path, triton = out.stdout.split()
    assert (Path(triton) / "libcuda.so.1").is_file(), triton
    assert ld_path.split(":")[0] == triton


def test_run_simulate_gives_vllm_what_the_simulator_needs_unless_set(sim_env, tmp_path):
    """vLLM's V1 model runner and PyTorch's sampler by default on the simulator; a user's own
    setting wins."""
    show = (
        "import os; print(os.environ['VLLM_USE_V2_MODEL_RUNNER'],"
        " os.environ['VLLM_USE_FLASHINFER_SAMPLER'])"
    )
    out = cgpu_run(tmp_path, sys.executable, "-c", show, env=sim_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "0"]
    env = {**sim_env(), "VLLM_USE_V2_MODEL_RUNNER": "1"}
    out = cgpu_run(tmp_path, sys.executable, "-c", show, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "0"]


def test_run_refuses_bad_input(sim_env, tmp_path):
    bad_size = cgpu("run", "--simulate", "--gpu-mem", "lots", "--", "true", env=sim_env())
    assert bad_size.returncode == 2 and "--gpu-mem" in bad_size.stderr
    bad_gpu = cgpu_run(tmp_path, "true", env=sim_env(), options=("--gpu", "7"))
    assert bad_gpu.returncode == 2 and "unknown GPU '7'" in bad_gpu.stderr


def test_run_keeps_and_ledger_shows_the_container(sim_env, native_build, tmp_path):
    probe = native_build / "cuda_probe"
    out = cgpu_run(tmp_path, probe, "dlsym", "init", "alloc", 100 * MiB, env=sim_env(),
                   gpu_mem="512MiB", options=("--keep",))  # fmt: skip
    assert out.returncode == 0, out.stderr
    shown = cgpu("ledger", "--state-dir", tmp_path, "--json", env=sim_env())
    assert shown.returncode == 0, shown.stderr
    (record,) = json.loads(shown.stdout)
    assert record["meta"]["source"] == "run"
    assert record["devices"][0]["limit"] == 512 * MiB
    assert record["devices"][0]["used"] == 0  # the process has exited
    assert record["devices"][0]["peak"] == 100 * MiB
    text = cgpu("ledger", "--state-dir", tmp_path, env=sim_env())
    assert "slice      512.0 MiB" in text.stdout


def test_ledger_reports_corrupt_files_and_fails(tmp_path):
    bad = tmp_path / "containers" / "broken"
    bad.mkdir(parents=True)
    (bad / "cgpu.ledger").write_bytes(b"garbage" * 10)
    out = cgpu("ledger", "--state-dir", tmp_path, env=dict(os.environ))
    assert out.returncode == 1 and "skipped" in out.stderr


def test_run_on_one_gpu_of_two_limits_only_that_gpu(sim_env, native_build, tmp_path):
    uuids = "GPU-aaaaaaaa-0000-4000-8000-000000000001,GPU-bbbbbbbb-0000-4000-8000-000000000002"
    env = sim_env(devices=2, uuids=uuids)
    probe = native_build / "cuda_probe"
    out = cgpu_run(tmp_path, probe, "dlsym", "init", "info", env=env,
                   options=("--gpu", "1", "--keep"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "info 0 1073741824 1073741824" in out.stdout
    (container,) = (tmp_path / "containers").iterdir()
    assert (container / "cgpu.conf").read_text().split("\n")[2:3] == [
        "device GPU-bbbbbbbb-0000-4000-8000-000000000002 1073741824"
    ]


def test_run_writes_the_measured_context_cost_and_the_shim_charges_it(
    sim_env, native_build, tmp_path
):
    # CGPU_CONTEXT_OVERHEAD=0 is the container's own claim; cgpu.conf's measured cost wins.
    env = sim_env(ctx_overhead="96MiB", extra={"CGPU_CONTEXT_OVERHEAD": "0"})
    probe = native_build / "cuda_probe"
    out = cgpu_run(tmp_path, probe, "dlsym", "init", "info", env=env,
                   options=("--keep",))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"info 0 {1024 * MiB - 96 * MiB} {1024 * MiB}" in out.stdout
    (container,) = (tmp_path / "containers").iterdir()
    lines = (container / "cgpu.conf").read_text().splitlines()
    (device,) = [line.split()[1] for line in lines if line.startswith("device ")]
    assert lines[-1] == f"context {device} {96 * MiB}"
    cache = json.loads((tmp_path / "context-cost.json").read_text())
    assert cache["costs"] == {device: 96 * MiB}
