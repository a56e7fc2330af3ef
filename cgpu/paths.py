"""Where the installed native pieces live."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
NATIVE_DIR = _PACKAGE_DIR / "_native"


def _native(name: str) -> Path:
    """Return an installed native file, honouring CGPU_NATIVE_DIR for development builds."""
    override = os.environ.get("CGPU_NATIVE_DIR")
    base = Path(override) if override else NATIVE_DIR
    return base / name


def shim_path() -> Path:
    """Absolute path of the installed shim, libcgpu.so."""
    return _native("libcgpu.so")


def ledger_lib_path() -> Path:
    """The ledger library that the cffi binding loads (same C as the shim)."""
    return _native("libcgpu_ledger.so")


def api_header_path() -> Path:
    """The C API header that cffi reads verbatim."""
    return _native("cgpu_api.h")


def sim_lib_dir() -> Path:
    """Directory holding the simulator's libcuda.so.1 and libnvidia-ml.so.1."""
    return _native("sim")
