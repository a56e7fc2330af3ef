"""GPU discovery through NVML, kept initialised for the plugin's life (health events need it)."""

from __future__ import annotations

import threading

import pynvml

from cgpu.core.gpus import GPU, list_gpus

_init_lock = threading.Lock()
_initialised = False


def init() -> None:
    """Initialise NVML once per process."""
    global _initialised
    with _init_lock:
        if not _initialised:
            pynvml.nvmlInit()
            _initialised = True


def discover() -> list[GPU]:
    """Every GPU NVML sees, in NVML index order."""
    init()
    return list_gpus()
