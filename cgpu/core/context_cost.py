"""What one CUDA context costs on each GPU of this node: measured on the host, cached.

The host components write it into each container's `cgpu.conf` (`context <uuid> <bytes>`), so
the shim charges it without measuring anything in the container. A device left out of the
result falls back to the shim's own measurement.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pynvml

from cgpu.core import context_probe
from cgpu.core.config import MAX_CONTEXT_BYTES
from cgpu.core.files import atomic_write
from cgpu.core.gpus import nvml_text
from cgpu.core.layout import ENV_PREFIX, ENV_SIM_PREFIX

log = logging.getLogger(__name__)

CACHE_NAME = "context-cost.json"
STDERR_TAIL = 2000
MEASURE_TIMEOUT_S = 120.0


class ContextCostError(RuntimeError):
    """The measurement could not run or gave no answer."""


def child_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) without the shim: no LD_PRELOAD, no CGPU_* but CGPU_SIM_*.

    CUDA_VISIBLE_DEVICES goes too: the measurement covers every GPU of the node.
    """
    source = os.environ if env is None else env
    return {
        k: v
        for k, v in source.items()
        if k not in ("LD_PRELOAD", "CUDA_VISIBLE_DEVICES")
        and (not k.startswith(ENV_PREFIX) or k.startswith(ENV_SIM_PREFIX))
    }


def _valid_costs(value: object) -> dict[str, int]:
    """{uuid: bytes} with only well-formed entries of 0 to 1 GiB."""
    if not isinstance(value, dict):
        return {}
    return {
        k: v
        for k, v in value.items()
        if isinstance(k, str)
        and isinstance(v, int)
        and not isinstance(v, bool)
        and 0 <= v <= MAX_CONTEXT_BYTES
    }


def _run(env: Mapping[str, str] | None, timeout: float) -> dict[str, object]:
    """The child's JSON answer, or ContextCostError."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", context_probe.__name__],
            env=child_env(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ContextCostError(f"context cost measurement did not run: {exc}") from exc
    if done.returncode != 0:
        tail = done.stderr.strip()[-STDERR_TAIL:]
        raise ContextCostError(
            f"context cost measurement failed (exit {done.returncode}): {tail or 'no stderr'}"
        )
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise ContextCostError(f"context cost measurement gave no answer: {exc}") from exc
    if not isinstance(answer, dict):
        raise ContextCostError("context cost measurement gave no answer")
    return answer


def measure(
    env: Mapping[str, str] | None = None, timeout: float = MEASURE_TIMEOUT_S
) -> dict[str, int]:
    """{uuid: bytes} that one CUDA context takes, per GPU, measured in a child process.

    GPUs where NVML does not show the child's memory, or shows more than 1 GiB, are left out.
    """
    return _valid_costs(_run(env, timeout).get("costs"))


def driver_version() -> str | None:
    """This process's NVML driver version, or None when NVML is not available."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        return nvml_text(pynvml.nvmlSystemGetDriverVersion())
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def cache_path(state_dir: str | os.PathLike[str]) -> Path:
    """Where the measured costs are kept."""
    return Path(state_dir) / CACHE_NAME


def _load_cache(state_dir: str | os.PathLike[str]) -> dict[str, int] | None:
    """The cached costs (maybe none) when measured under the current driver, else None."""
    path = cache_path(state_dir)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring %s: %s", path, exc)
        return None
    if not isinstance(data, dict) or not isinstance(data.get("costs"), dict):
        log.warning("ignoring %s: not a context-cost record", path)
        return None
    current = driver_version()
    if current is None or data.get("driver") != current:
        found = data.get("driver")
        log.warning("ignoring %s: measured under driver %r, now %r", path, found, current)
        return None
    return _valid_costs(data["costs"])


def cached(state_dir: str | os.PathLike[str]) -> dict[str, int]:
    """The cached costs when they were measured under the current driver, else {}.

    Never raises: a missing, corrupt or stale file gives {} (with a warning unless missing).
    """
    return _load_cache(state_dir) or {}


def ensure(
    state_dir: str | os.PathLike[str], env: Mapping[str, str] | None = None
) -> dict[str, int]:
    """The cached costs, else measured now (in `env`) and cached; {} when that fails.

    Never raises: without costs the shim measures a context itself. A measurement that ran
    but saw no context's memory is cached too, so it is not repeated under the same driver.
    """
    costs = _load_cache(state_dir)
    if costs is not None:
        return costs
    try:
        answer = _run(env, MEASURE_TIMEOUT_S)
    except ContextCostError as exc:
        log.warning("%s; the shim will measure contexts itself", exc)
        return {}
    costs = _valid_costs(answer.get("costs"))
    record = {"driver": answer.get("driver"), "costs": costs, "measured": time.time()}
    try:
        atomic_write(cache_path(state_dir), json.dumps(record, sort_keys=True) + "\n")
    except OSError as exc:
        log.warning("cannot cache the context costs in %s: %s", cache_path(state_dir), exc)
    if not costs:
        log.info("NVML showed no context's memory; the shim will measure contexts itself")
    return costs
