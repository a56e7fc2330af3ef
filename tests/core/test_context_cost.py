"""What a CUDA context costs per GPU, measured on the host (here: the simulator) and cached."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cgpu.core import context_cost
from cgpu.core.paths import shim_path

MIB = 1 << 20
COST = 96 * MIB
Env = Callable[..., dict[str, str]]


def _python(env: dict[str, str], code: str, *argv: str) -> Any:
    """Run `code` in a Python with `env` (so its NVML is the simulator's); its JSON answer."""
    out = subprocess.run(
        [sys.executable, "-c", code, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


UUIDS = (
    "import json; from cgpu.core import gpus; "
    "print(json.dumps([g.uuid for g in gpus.list_gpus()]))"
)
ENSURE = (
    "import json, sys; from cgpu.core import context_cost; "
    "print(json.dumps(context_cost.ensure(sys.argv[1])))"
)
CACHED = (
    "import json, sys; from cgpu.core import context_cost; "
    "print(json.dumps(context_cost.cached(sys.argv[1])))"
)


def test_measure_gives_each_gpus_context_cost(sim_env: Env) -> None:
    env = sim_env(devices=2, ctx_overhead="96MiB")
    uuids = _python(env, UUIDS)
    assert len(uuids) == 2
    assert context_cost.measure(env) == dict.fromkeys(uuids, COST)


def test_measure_runs_without_the_shim(sim_env: Env) -> None:
    # The shim would refuse cuInit under a malformed limit: the child must not load it.
    env = sim_env(
        devices=1,
        ctx_overhead="96MiB",
        extra={"LD_PRELOAD": str(shim_path()), "CGPU_MEM_LIMIT": "lots"},
    )
    assert list(context_cost.measure(env).values()) == [COST]


def test_a_failed_measurement_says_why(sim_env: Env) -> None:
    with pytest.raises(context_cost.ContextCostError, match="cuInit"):
        context_cost.measure(sim_env(ctx_overhead="-1"))


def test_without_per_process_memory_nothing_is_measured(sim_env: Env) -> None:
    env = sim_env(devices=2, ctx_overhead="96MiB")
    del env["CGPU_SIM_STATE"]  # the simulator lists no process without its state file
    assert context_cost.measure(env) == {}


def test_in_a_pid_namespace_the_new_process_is_taken(sim_env: Env, tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    env = sim_env(devices=2, ctx_overhead="96MiB")
    probe = [unshare or "unshare", "--pid", "--fork", "--mount-proc", "true"]
    if unshare is None or subprocess.run(probe, capture_output=True).returncode != 0:
        pytest.skip("this machine allows no pid namespace")
    code = (
        "import json, os; from cgpu.core import context_cost; "
        "assert os.getpid() < 10, os.getpid(); print(json.dumps(context_cost.measure()))"
    )
    out = subprocess.run(
        [*probe[:-1], sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == dict.fromkeys(_python(env, UUIDS), COST)


def test_ensure_measures_once_and_caches(sim_env: Env, state_dir: Path) -> None:
    env = sim_env(devices=2, ctx_overhead="96MiB")
    first = _python(env, ENSURE, str(state_dir))
    assert first == dict.fromkeys(_python(env, UUIDS), COST)
    record = json.loads(context_cost.cache_path(state_dir).read_text())
    assert record["costs"] == first and record["driver"] == "580.65.06"
    # Measured again, the context would now cost 50 MiB: the cache answers instead.
    again = _python(sim_env(devices=2, ctx_overhead="50MiB"), ENSURE, str(state_dir))
    assert again == first
    assert json.loads(context_cost.cache_path(state_dir).read_text()) == record


def test_a_corrupt_cache_is_ignored_then_replaced(sim_env: Env, state_dir: Path) -> None:
    env = sim_env(devices=1, ctx_overhead="96MiB")
    path = context_cost.cache_path(state_dir)
    for garbage in ("{not json", "[1, 2]", '{"driver": "580.65.06", "costs": 7}'):
        path.write_text(garbage)
        assert _python(env, CACHED, str(state_dir)) == {}
    assert list(_python(env, ENSURE, str(state_dir)).values()) == [COST]
    assert list(json.loads(path.read_text())["costs"].values()) == [COST]


def test_another_driver_invalidates_the_cache(sim_env: Env, state_dir: Path) -> None:
    env = sim_env(devices=1, ctx_overhead="96MiB")
    [uuid] = _python(env, UUIDS)
    assert _python(env, ENSURE, str(state_dir)) == {uuid: COST}
    upgraded = sim_env(devices=1, ctx_overhead="64MiB", driver_release="535.261.03")
    assert _python(upgraded, CACHED, str(state_dir)) == {}
    assert _python(upgraded, ENSURE, str(state_dir)) == {uuid: 64 * MIB}
    assert json.loads(context_cost.cache_path(state_dir).read_text())["driver"] == "535.261.03"


def test_a_cache_of_the_current_driver_is_read(sim_env: Env, state_dir: Path) -> None:
    env = sim_env(devices=1)
    [uuid] = _python(env, UUIDS)
    record = {"driver": "580.65.06", "costs": {uuid: 123 * MIB, "GPU-x": -5}, "measured": 1.0}
    context_cost.cache_path(state_dir).write_text(json.dumps(record))
    assert _python(env, CACHED, str(state_dir)) == {uuid: 123 * MIB}
    record["driver"] = "1.2.3"
    context_cost.cache_path(state_dir).write_text(json.dumps(record))
    assert _python(env, CACHED, str(state_dir)) == {}


def test_ensure_never_raises(sim_env: Env, state_dir: Path) -> None:
    assert _python(sim_env(ctx_overhead="-1"), ENSURE, str(state_dir)) == {}
    assert not context_cost.cache_path(state_dir).exists()


def test_the_child_loses_the_shims_variables() -> None:
    env = {
        "LD_PRELOAD": "/x/libcgpu.so",
        "CGPU_CONTEXT_OVERHEAD": "0",
        "CGPU_LEDGER_DIR": "/l",
        "CGPU_SIM_STATE": "/s",
        "CUDA_VISIBLE_DEVICES": "0",
        "PATH": "/bin",
    }
    assert context_cost.child_env(env) == {"CGPU_SIM_STATE": "/s", "PATH": "/bin"}
