"""The two stages of `cgpu hook`: set a container up before it starts, clean up once it stopped."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from cgpu.core import context_cost
from cgpu.core.containers import (
    containers_root,
    create_container_dir,
    read_meta,
    remove_container_dir,
)
from cgpu.core.gpus import GPU, list_gpus
from cgpu.core.layout import KEY_ANNOTATION, SOURCE_HOOK
from cgpu.core.paths import shim_path
from cgpu.core.procfs import start_time
from cgpu.hooks.devices import container_gpus, slices
from cgpu.hooks.errors import RequestError
from cgpu.hooks.inject import Plan
from cgpu.hooks.oci import State, labels, read_spec
from cgpu.hooks.request import parse_request

INJECT_TIMEOUT_S = 60
# Run the injector isolated (-I: no PYTHON* variables, no user site, no cwd on sys.path),
# importing `cgpu` from where this copy of it lives.
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from cgpu.hooks.inject import main; sys.exit(main())"
)
_PACKAGE_PARENT = Path(__file__).resolve().parents[2]  # the directory holding `cgpu`


class InjectError(RuntimeError):
    """The injector failed; it has undone its own work."""


def run_injector(plan: Plan) -> None:
    """Run `cgpu.hooks.inject` in a fresh single-threaded process; raise InjectError on failure."""
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _BOOT, str(_PACKAGE_PARENT)],
        input=json.dumps(asdict(plan)).encode(),
        capture_output=True,
        timeout=INJECT_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        raise InjectError(lines[-1] if lines else f"the injector exited with {proc.returncode}")


def requested_slices(
    env: dict[str, str], gpus: Callable[[], list[GPU]] = list_gpus
) -> dict[str, int]:
    """The slice of each GPU the container sees, by UUID; empty when it asks for none.

    The limit variables are read by the shim's own parser, so this is what the shim in the
    container enforces. Raises RequestError, naming the variable, when they are malformed.
    """
    request = parse_request(env)
    if request is None:
        return {}  # no limit variable, or CGPU_DISABLE
    return slices(request, container_gpus(env, gpus()), env)


def prestart(state: State, state_dir: Path) -> str | None:
    """Give the container its slice; returns its directory, or None when it asked for none.

    Everything the container asks for is validated before anything is made. The container
    directory is made before the injection and removed again if the injection fails.
    """
    spec = read_spec(state.bundle)
    if KEY_ANNOTATION in {**state.annotations, **spec.annotations}:
        return None  # the device plugin gave it a slice: its cgpu.conf wins in the shim
    limits = requested_slices(spec.env)
    if not limits:
        return None
    if state.pid <= 1:
        raise RequestError(
            f"the OCI state has pid {state.pid}: run cgpu hook as a prestart or createRuntime hook"
        )
    meta = {
        "source": SOURCE_HOOK,
        "container_id": state.id,
        "init_pid": state.pid,
        "init_start_time": start_time(state.pid),
        **labels({**state.annotations, **spec.annotations}),
    }
    shim = shim_path()
    if not shim.is_file():
        raise RuntimeError(f"the shim is not installed at {shim}")
    # What a context costs, as the device plugin, the DRA driver or `cgpu run` measured it on
    # this node; never measured here (a container start must stay fast): else the shim does.
    contexts = context_cost.cached(state_dir)
    directory = create_container_dir(state_dir, state.id, limits, meta, contexts=contexts)
    try:
        run_injector(Plan(state.pid, spec.rootfs, str(directory), str(shim)))
    except BaseException:
        remove_container_dir(state_dir, state.id)
        raise
    return str(directory)


def poststop(state: State, state_dir: Path) -> bool:
    """Remove the directory the hook made for this container; returns whether there was one."""
    meta = read_meta(containers_root(state_dir) / state.id)
    if meta.get("source") != SOURCE_HOOK or meta.get("container_id") != state.id:
        return False
    return remove_container_dir(state_dir, state.id)
