"""The host files Allocate mounts into containers (kept in `cgpu.core.hostfiles`)."""

from __future__ import annotations

from cgpu.core.hostfiles import LIB_SUBDIR, install_shim, write_preload

__all__ = ["LIB_SUBDIR", "install_shim", "write_preload"]
