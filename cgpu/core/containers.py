"""Per-container directories under the state dir: config, ledger and metadata together."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cgpu.core.config import PRIORITIES, ComputeShare, write_config
from cgpu.core.files import atomic_write, read_plain_file
from cgpu.core.layout import CONTAINERS_SUBDIR, DEFAULT_STATE_DIR, LEDGER_NAME, META_NAME
from cgpu.core.ledger import init_ledger

_KEY_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def default_state_dir() -> Path:
    """/var/lib/cgpu when this user may write it (what the exporter reads), else a private one."""
    system = Path(DEFAULT_STATE_DIR)
    if os.access(system, os.W_OK) or (not system.exists() and os.access(system.parent, os.W_OK)):
        return system
    base = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    return Path(base) / f"cgpu-{os.getuid()}-state"


def validate_key(key: str) -> str:
    """Return `key` if it is a safe directory name, else raise ValueError."""
    if not _KEY_RE.match(key) or key in (".", ".."):
        raise ValueError(f"invalid container key {key!r}")
    return key


def containers_root(state_dir: str | os.PathLike[str]) -> Path:
    """The directory that holds one subdirectory per container."""
    return Path(state_dir) / CONTAINERS_SUBDIR


ROOT_MODE = 0o700  # only its owner passes through: a container reaches its own directory
# through the bind mount alone, and no other host user reaches a ledger or compute.sock


def make_private_root(root: Path) -> None:
    """Create the containers root with ROOT_MODE, or take group and other access away from
    one that exists and is ours (an older install made it 0755). OSError if it cannot be."""
    root.mkdir(mode=ROOT_MODE, parents=True, exist_ok=True)
    info = os.stat(root, follow_symlinks=False)
    if info.st_mode & 0o077 and info.st_uid == os.geteuid():
        os.chmod(root, ROOT_MODE, follow_symlinks=False)


def create_container_dir(
    state_dir: str | os.PathLike[str],
    key: str,
    limits: dict[str, int],
    meta: dict[str, Any],
    compute: Mapping[str, ComputeShare] | None = None,
    contexts: dict[str, int] | None = None,
) -> Path:
    """Make `<state>/containers/<key>/` with its config, an empty ledger and meta.json.

    `compute` ({uuid: percent}, or (percent, policy[, priority]) tuples) adds the compute
    shares to the config, and `contexts` ({uuid: bytes}, `cgpu.core.context_cost`) what a CUDA
    context costs on each device.

    The directory is built under a temporary name and renamed into place, so a failure
    never leaves a half-made container behind.
    """
    root = containers_root(state_dir)
    make_private_root(root)
    final = root / validate_key(key)
    staging = root / f".staging-{key}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(mode=0o755)
    try:
        write_config(staging, limits, compute, contexts)
        init_ledger(staging / LEDGER_NAME, limits)
        os.chmod(staging / LEDGER_NAME, 0o666)
        write_meta(staging, {"key": key, "created": time.time(), **meta})
        if final.exists():
            shutil.rmtree(final)
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def write_meta(container_dir: str | os.PathLike[str], meta: dict[str, Any]) -> None:
    """Write meta.json atomically."""
    atomic_write(Path(container_dir) / META_NAME, json.dumps(meta, sort_keys=True) + "\n")


META_MAX_BYTES = 64 * 1024
META_COMPUTE_PRIORITY = "compute_priority"


class MetaError(ValueError):
    """A meta.json that cannot be trusted: not a plain file, too large, or not a JSON object."""


def _typed(meta: dict[str, Any]) -> dict[str, Any]:
    """`meta` without the known fields that have the wrong type (unknown fields are kept)."""
    out = {}
    for name, value in meta.items():
        check = _FIELD_TYPES.get(name)
        if check is None or check(value):
            out[name] = value
    return out


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63


def _is_time(value: Any) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and math.isfinite(value) and value >= 0


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_priority(value: Any) -> bool:
    return value in PRIORITIES


def _is_str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


_FIELD_TYPES = {
    "key": _is_str,
    "source": _is_str,
    "namespace": _is_str,
    "pod": _is_str,
    "pod_uid": _is_str,
    "container": _is_str,
    "container_id": _is_str,
    "device_ids": _is_str_list,
    "annotations": _is_str_map,
    "created": _is_time,
    "init_pid": _is_count,
    "init_start_time": _is_count,
    # The pod's compute priority (cgpu.io/compute-priority, or a DRA ComputeConfig), recorded
    # whether or not it has a compute limit: a container without one takes turns at it as best
    # effort (cgpu/compute/discovery.py).
    META_COMPUTE_PRIORITY: _is_priority,
}


def load_meta(container_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The container's meta.json; {} when it does not exist.

    Raises MetaError when it exists but is not a JSON object in a plain file of at most
    META_MAX_BYTES (whatever its bytes, size or type), OSError when it cannot be read. Known
    fields of the wrong type are dropped, so readers may rely on the types of what is left.
    """
    path = Path(container_dir) / META_NAME
    try:
        data = read_plain_file(path, META_MAX_BYTES, MetaError)
    except FileNotFoundError:
        return {}
    try:
        meta = json.loads(data)
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, or absurd nesting
        raise MetaError(f"{path}: not JSON ({type(exc).__name__})") from None
    if not isinstance(meta, dict):
        raise MetaError(f"{path}: not a JSON object")
    return _typed(meta)


def read_meta(container_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The container's meta.json, or {} when it is missing, unreadable or malformed."""
    try:
        return load_meta(container_dir)
    except (OSError, MetaError):
        return {}


def list_container_dirs(state_dir: str | os.PathLike[str]) -> Iterator[Path]:
    """Every container directory under the state dir (staging directories excluded)."""
    root = containers_root(state_dir)
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except FileNotFoundError:
        return
    for entry in entries:
        named = _KEY_RE.match(entry.name) and not entry.name.startswith(".")
        if named and entry.is_dir(follow_symlinks=False):
            yield Path(entry.path)


def remove_container_dir(state_dir: str | os.PathLike[str], key: str) -> bool:
    """Delete a container's directory; returns whether it existed."""
    target = containers_root(state_dir) / validate_key(key)
    if not target.exists():
        return False
    shutil.rmtree(target)
    return True
