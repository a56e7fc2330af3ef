"""What Allocate puts into a container: the shim, /etc/ld.so.preload and the ledger directory."""

from __future__ import annotations

import filecmp
import shutil
from pathlib import Path

from cgpu.core.files import atomic_write
from cgpu.core.layout import CONTAINER_LEDGER_DIR, CONTAINER_PRELOAD, CONTAINER_SHIM
from cgpu.core.ledger import LEDGER_NAME
from cgpu.deviceplugin.api import deviceplugin_v1beta1_pb2 as api

LIB_SUBDIR = "lib"


def install_shim(source: Path, state_dir: Path) -> Path:
    """Copy the shim to `<state>/lib/libcgpu.so` (atomically, only when it changed).

    The state directory is a host path, so the copy is mountable into containers even when
    the plugin itself runs in a container. Replacing by rename leaves the file that running
    containers already have mounted untouched.
    """
    if not source.is_file():
        raise FileNotFoundError(f"shim not found: {source} (build cgpu or pass --host-shim-path)")
    target = state_dir / LIB_SUBDIR / "libcgpu.so"
    if target.is_file() and filecmp.cmp(source, target, shallow=False):
        return target
    atomic_write(target, source.read_bytes(), 0o755)
    shutil.copystat(source, target)
    return target


def write_preload(state_dir: Path) -> Path:
    """Write `<state>/lib/ld.so.preload`, naming the shim at its path inside the container."""
    target = state_dir / LIB_SUBDIR / "ld.so.preload"
    atomic_write(target, f"{CONTAINER_SHIM}\n".encode())
    return target


def mounts(shim: Path, preload: Path, container_dir: Path) -> list[api.Mount]:
    """The mounts every allocated container gets.

    The container directory is read-only, so a container cannot rewrite its own slice
    (cgpu.conf) or labels (meta.json); only the ledger file inside it is writable.
    """
    return [
        api.Mount(container_path=CONTAINER_SHIM, host_path=str(shim), read_only=True),
        api.Mount(container_path=CONTAINER_PRELOAD, host_path=str(preload), read_only=True),
        api.Mount(
            container_path=CONTAINER_LEDGER_DIR, host_path=str(container_dir), read_only=True
        ),
        api.Mount(
            container_path=f"{CONTAINER_LEDGER_DIR}/{LEDGER_NAME}",
            host_path=str(container_dir / LEDGER_NAME),
            read_only=False,
        ),
    ]
