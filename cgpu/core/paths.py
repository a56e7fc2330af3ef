"""Where the installed native pieces live."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from cgpu.core.layout import ENV_NATIVE_DIR, SHIM_NAME

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the `cgpu` package
NATIVE_DIR = _PACKAGE_DIR / "_native"


def _native_base() -> Path:
    """The directory of the built native files.

    CGPU_NATIVE_DIR wins (development builds). A source checkout has no built files, so
    when this package is imported from one, the installed copy on sys.path is used.
    """
    override = os.environ.get(ENV_NATIVE_DIR)
    if override:
        return Path(override)
    if NATIVE_DIR.is_dir():
        return NATIVE_DIR
    for entry in sys.path:
        candidate = Path(entry or ".") / "cgpu" / "_native"
        if candidate.is_dir():
            return candidate.resolve()
    return NATIVE_DIR


def _native(name: str) -> Path:
    """Return an installed native file."""
    return _native_base() / name


def shim_path() -> Path:
    """Absolute path of the installed shim, libcgpu.so."""
    return _native(SHIM_NAME)


def ledger_lib_path() -> Path:
    """The ledger library that the cffi binding loads (same C as the shim)."""
    return _native("libcgpu_ledger.so")


def api_header_path() -> Path:
    """The C API header that cffi reads verbatim."""
    return _native("cgpu_api.h")


SIMULATOR_VLLM_DEFAULTS = {"VLLM_USE_V2_MODEL_RUNNER": "0", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
"""vLLM settings `cgpu run` gives on the simulated GPU unless the environment sets them."""


def sim_lib_dir() -> Path:
    """Directory holding the simulator's libcuda.so.1 and libnvidia-ml.so.1."""
    return _native("sim")


def with_simulator(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with the simulator's libraries first on the path.

    Triton (torch.compile's GPU backend) links its launchers against the libcuda that
    TRITON_LIBCUDA_PATH names, else the first in `ldconfig -p` (a real driver's, where one is
    installed): it is pointed at the simulator's. vLLM is given two defaults, where the
    environment does not set them, because kernels compute nothing here: its V1 model runner (the
    V2 one keeps request bookkeeping on the device and never finishes) and PyTorch's sampler
    (FlashInfer's would build kernels with nvcc at start-up). See docs/clients.md, "vLLM".
    """
    out = dict(os.environ if env is None else env)
    path = out.get("LD_LIBRARY_PATH", "")
    out["LD_LIBRARY_PATH"] = f"{sim_lib_dir()}:{path}" if path else str(sim_lib_dir())
    out["TRITON_LIBCUDA_PATH"] = str(sim_lib_dir())
    for name, value in SIMULATOR_VLLM_DEFAULTS.items():
        out.setdefault(name, value)
    return out
