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
    header = paths.api_header_path()
    ffi.cdef(header.read_text())
    # The binding library also carries the test-only entry points (never the shim).
    ffi.cdef(header.with_name("cgpu_test_api.h").read_text())
    lib = ffi.dlopen(str(paths.ledger_lib_path()))
    return ffi, lib
