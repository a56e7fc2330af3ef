"""Per-container directories under the state dir: config, ledger and metadata together."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cgpu.core.config import write_config
from cgpu.core.files import atomic_write
from cgpu.core.layout import LEDGER_NAME, META_NAME
from cgpu.core.ledger import init_ledger

CONTAINERS_SUBDIR = "containers"
DEFAULT_STATE_DIR = "/var/lib/cgpu"

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


def create_container_dir(
    state_dir: str | os.PathLike[str],
    key: str,
    limits: dict[str, int],
    meta: dict[str, Any],
    compute: dict[str, int] | None = None,
) -> Path:
    """Make `<state>/containers/<key>/` with its config, an empty ledger and meta.json.

    `compute` ({uuid: percent}) adds the compute shares to the config.

    The directory is built under a temporary name and renamed into place, so a failure
    never leaves a half-made container behind.
    """
    root = containers_root(state_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / validate_key(key)
    staging = root / f".staging-{key}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(mode=0o755)
    try:
        write_config(staging, limits, compute)
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


def read_meta(container_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The container's meta.json, or {} when it is missing or unreadable."""
    try:
        data = json.loads((Path(container_dir) / META_NAME).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


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
