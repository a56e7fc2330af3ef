"""The host files injectors mount into containers: the shim's copy and the ld.so.preload.

What a container gets is described once, in `cgpu.core.injection`; the device plugin and the
DRA driver render it, and both mount these host copies.
"""

from __future__ import annotations

import filecmp
import shutil
from pathlib import Path

from cgpu.core.files import atomic_write
from cgpu.core.injection import write_preload as _write_preload
from cgpu.core.layout import LIB_SUBDIR, PRELOAD_NAME, SHIM_NAME


def install_shim(source: Path, state_dir: Path) -> Path:
    """Copy the shim to `<state>/lib/libcgpu.so` (atomically, only when it changed).

    The state directory is a host path, so the copy is mountable into containers even when
    the plugin itself runs in a container. Replacing by rename leaves the file that running
    containers already have mounted untouched.
    """
    if not source.is_file():
        raise FileNotFoundError(f"shim not found: {source} (build cgpu or pass --host-shim-path)")
    target = state_dir / LIB_SUBDIR / SHIM_NAME
    if target.is_file() and filecmp.cmp(source, target, shallow=False):
        return target
    atomic_write(target, source.read_bytes(), 0o755)
    shutil.copystat(source, target)
    return target


def write_preload(state_dir: Path) -> Path:
    """Write `<state>/lib/ld.so.preload`, naming the shim at its path inside the container."""
    return _write_preload(state_dir / LIB_SUBDIR / PRELOAD_NAME)
