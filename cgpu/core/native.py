"""The cffi binding to libcgpu_ledger.so, declared from the same header the C code uses."""

from __future__ import annotations

import functools
from typing import Any

import cffi

from cgpu.core import paths


@functools.cache
def load() -> tuple[cffi.FFI, Any]:
    """Return (ffi, lib) for the ledger library; loaded once per process."""
    ffi = cffi.FFI()
    ffi.cdef(paths.api_header_path().read_text())
    lib = ffi.dlopen(str(paths.ledger_lib_path()))
    return ffi, lib
