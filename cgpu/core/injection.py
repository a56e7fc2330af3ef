"""What a container is given: the one description that every injector renders.

The device plugin renders it as an Allocate response (mounts and environment), the OCI hook
as bind mounts made in the container's mount namespace, and `cgpu cdi` as a CDI spec. The
container gets:

- the shim at `CONTAINER_SHIM`, read-only;
- an `/etc/ld.so.preload` naming the shim first, read-only, noexec;
- its container directory at `CONTAINER_LEDGER_DIR`, read-only, noexec, with the ledger file
  bound over itself read-write, so its processes can charge the ledger but not rewrite their
  slice (cgpu.conf) or labels (meta.json);
- `CGPU_LEDGER_DIR` naming that directory (where an injector can set variables; the shim
  looks there by default anyway).

Every mount is nosuid and nodev.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from cgpu.core.files import atomic_write
from cgpu.core.layout import (
    CONTAINER_LEDGER_DIR,
    CONTAINER_PRELOAD,
    CONTAINER_SHIM,
    ENV_LEDGER_DIR,
    LEDGER_NAME,
)


@dataclass(frozen=True)
class Mount:
    """One bind mount of a host file or directory into the container."""

    host_path: str
    container_path: str
    read_only: bool
    executable: bool = False  # False: noexec

    def options(self) -> list[str]:
        """OCI/CDI mount options."""
        return [
            *(["ro"] if self.read_only else []),
            "nosuid",
            "nodev",
            "bind",
            *([] if self.executable else ["noexec"]),
        ]


def shim_mounts(shim: str | os.PathLike[str], preload: str | os.PathLike[str]) -> list[Mount]:
    """The shim and the ld.so.preload that loads it into every process."""
    return [
        Mount(os.fspath(shim), CONTAINER_SHIM, read_only=True, executable=True),
        Mount(os.fspath(preload), CONTAINER_PRELOAD, read_only=True),
    ]


def ledger_mounts(container_dir: str | os.PathLike[str]) -> list[Mount]:
    """The container directory, read-only, and its ledger inside it, writable."""
    directory = os.fspath(container_dir)
    return [
        Mount(directory, CONTAINER_LEDGER_DIR, read_only=True),
        Mount(
            os.path.join(directory, LEDGER_NAME),
            f"{CONTAINER_LEDGER_DIR}/{LEDGER_NAME}",
            read_only=False,
        ),
    ]


def container_mounts(
    shim: str | os.PathLike[str],
    preload: str | os.PathLike[str],
    container_dir: str | os.PathLike[str],
) -> list[Mount]:
    """Every mount a container with a slice gets, in the order they are made."""
    return shim_mounts(shim, preload) + ledger_mounts(container_dir)


def environment() -> dict[str, str]:
    """The variables a container with a slice gets."""
    return {ENV_LEDGER_DIR: CONTAINER_LEDGER_DIR}


def preload_text(existing: bytes | None = None) -> bytes:
    """An ld.so.preload naming the shim first, then the other entries of the image's own file."""
    entries = [CONTAINER_SHIM.encode()]
    for token in re.split(rb"[\s:]+", existing or b""):
        if token and b"\0" not in token and token not in entries:
            entries.append(token)
    return b"\n".join(entries) + b"\n"


def write_preload(target: str | os.PathLike[str]) -> Path:
    """Atomically write an ld.so.preload naming only the shim to `target`; returns its path."""
    return atomic_write(target, preload_text())
