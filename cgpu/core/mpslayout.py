"""Where the MPS control daemons live on the host, and how their health is published.

`cgpu mps-daemon` runs one `nvidia-cuda-mps-control -d` per GPU, with its pipe and log
directories under `<root>/<gpu-uuid>/{pipe,log}`, and keeps `<root>/<gpu-uuid>/health.json`
current. The device plugin (`--isolation mps`) mounts the pipe directory and `<root>/shm` into
containers and reads the health file: a GPU whose file is missing, says "down", or has not
been refreshed for `max_age` seconds has no running daemon.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from cgpu.core.files import atomic_write
from cgpu.core.layout import UUID_RE

HEALTH_NAME = "health.json"
READY = "ready"
DOWN = "down"
DEFAULT_MAX_AGE = 10.0


def gpu_dir(root: str | os.PathLike[str], uuid: str) -> Path:
    """`<root>/<uuid>`; ValueError for a UUID that is not a safe file name."""
    if not UUID_RE.match(uuid):
        raise ValueError(f"invalid GPU UUID {uuid!r}")
    return Path(root) / uuid


def pipe_dir(root: str | os.PathLike[str], uuid: str) -> Path:
    """The daemon's CUDA_MPS_PIPE_DIRECTORY."""
    return gpu_dir(root, uuid) / "pipe"


def log_dir(root: str | os.PathLike[str], uuid: str) -> Path:
    """The daemon's CUDA_MPS_LOG_DIRECTORY."""
    return gpu_dir(root, uuid) / "log"


def shm_dir(root: str | os.PathLike[str]) -> Path:
    """The shared memory the daemons and their clients both see as /dev/shm."""
    return Path(root) / "shm"


def health_file(root: str | os.PathLike[str], uuid: str) -> Path:
    """The health file of the GPU's daemon."""
    return gpu_dir(root, uuid) / HEALTH_NAME


@dataclass(frozen=True)
class DaemonHealth:
    """What the health file says, judged at one moment."""

    ready: bool
    reason: str


def write_health(root: str | os.PathLike[str], uuid: str, state: str, detail: str = "") -> None:
    """Publish a daemon's state (READY or DOWN) with the time and the supervisor's pid."""
    body = {"state": state, "detail": detail, "updated": time.time(), "pid": os.getpid()}
    atomic_write(health_file(root, uuid), json.dumps(body) + "\n")


def read_health(
    root: str | os.PathLike[str],
    uuid: str,
    max_age: float = DEFAULT_MAX_AGE,
    now: float | None = None,
) -> DaemonHealth:
    """Whether the GPU's daemon is up, by its health file; never raises for a bad file."""
    path = health_file(root, uuid)
    try:
        body = json.loads(path.read_text())
        state, updated = str(body["state"]), float(body["updated"])
    except FileNotFoundError:
        return DaemonHealth(False, f"no {path}: is cgpu mps-daemon running on this node?")
    except (OSError, ValueError, KeyError, TypeError) as err:
        return DaemonHealth(False, f"unreadable {path}: {err}")
    age = (time.time() if now is None else now) - updated
    if state != READY:
        return DaemonHealth(False, f"daemon {state}: {body.get('detail') or 'no detail'}")
    if age > max_age:
        return DaemonHealth(False, f"{path} not refreshed for {age:.0f}s: supervisor gone?")
    return DaemonHealth(True, "ready")
