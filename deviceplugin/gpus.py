"""GPU discovery through NVML."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pynvml

_init_lock = threading.Lock()
_initialised = False


@dataclass(frozen=True)
class Gpu:
    """One physical GPU as NVML reports it."""

    index: int
    uuid: str
    name: str
    total_bytes: int


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def init() -> None:
    """Initialise NVML once per process."""
    global _initialised
    with _init_lock:
        if not _initialised:
            pynvml.nvmlInit()
            _initialised = True


def discover() -> list[Gpu]:
    """Every GPU NVML sees, in NVML index order."""
    init()
    gpus = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        gpus.append(
            Gpu(
                index=index,
                uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                name=_text(pynvml.nvmlDeviceGetName(handle)),
                total_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
            )
        )
    return gpus


def probe(uuid: str) -> bool:
    """Whether NVML still answers for the GPU (used before declaring it healthy again)."""
    try:
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        pynvml.nvmlDeviceGetMemoryInfo(handle)
    except pynvml.NVMLError:
        return False
    return True
