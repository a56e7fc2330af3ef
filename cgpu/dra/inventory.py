"""The node's GPUs as the driver publishes them: NVML's facts, and each GPU's health."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pynvml

from cgpu.core.gpus import GPUError, nvml_text

log = logging.getLogger(__name__)

# nvmlDeviceGetArchitecture's values (nvml.h NVML_DEVICE_ARCH_*).
ARCHITECTURES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada",
    9: "Hopper",
    10: "Blackwell",
}


@dataclass(frozen=True)
class GpuInfo:
    """One GPU: what NVML says about it."""

    index: int
    uuid: str
    name: str
    total_bytes: int
    architecture: str
    driver_version: str
    compute_capability: str  # "8.0"
    minor: int  # /dev/nvidia<minor>

    @property
    def device_name(self) -> str:
        """The device's name in the ResourceSlice (a DNS label)."""
        return f"gpu-{self.index}"


def _optional(call: Callable[[], object], default: object) -> object:
    """A query some drivers refuse (NOT_SUPPORTED) gives `default`."""
    try:
        return call()
    except pynvml.NVMLError:
        return default


def discover() -> list[GpuInfo]:
    """Every GPU NVML sees, in index order (NVML stays initialised for health events)."""
    try:
        pynvml.nvmlInit()
        driver = nvml_text(pynvml.nvmlSystemGetDriverVersion())
        out = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            arch = _optional(lambda h=handle: pynvml.nvmlDeviceGetArchitecture(h), -1)
            major, minor_cc = _optional(
                lambda h=handle: pynvml.nvmlDeviceGetCudaComputeCapability(h), (0, 0)
            )  # type: ignore[misc]
            out.append(
                GpuInfo(
                    index=index,
                    uuid=nvml_text(pynvml.nvmlDeviceGetUUID(handle)),
                    name=nvml_text(pynvml.nvmlDeviceGetName(handle)),
                    total_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                    architecture=ARCHITECTURES.get(int(arch), "Unknown"),  # type: ignore[call-overload]
                    driver_version=driver,
                    compute_capability=f"{major}.{minor_cc}",
                    minor=int(
                        _optional(lambda h=handle: pynvml.nvmlDeviceGetMinorNumber(h), index)  # type: ignore[call-overload]
                    ),
                )
            )
        return out
    except pynvml.NVMLError as err:
        raise GPUError(f"NVML failed: {err} (is the NVIDIA driver installed?)") from err


class Inventory:
    """The GPUs, which of them are healthy and why not; calls `on_change` when health changes,
    and wakes `wait_for_change` callers."""

    def __init__(self, gpus: list[GpuInfo]) -> None:
        self.gpus = list(gpus)
        self._unhealthy: dict[str, str] = {}  # uuid -> why
        self._cond = threading.Condition()
        self._version = 0
        self._updated = time.time()
        self.on_change: Callable[[], None] = lambda: None

    def add(self, gpus: list[GpuInfo]) -> None:
        """Offer more GPUs (ones the driver came to own, `cgpu.core.ownership`)."""
        with self._cond:
            known = {g.uuid for g in self.gpus}
            new = [g for g in gpus if g.uuid not in known]
            if not new:
                return
            # a new list: readers keep the one they hold
            self.gpus = sorted([*self.gpus, *new], key=lambda g: g.index)
            self._version += 1
            self._updated = time.time()
            self._cond.notify_all()
        self.on_change()

    def by_name(self, device: str) -> GpuInfo | None:
        """The GPU published as `device` ("gpu-0"), or None."""
        return next((g for g in self.gpus if g.device_name == device), None)

    def healthy(self) -> list[GpuInfo]:
        """The GPUs to publish."""
        with self._cond:
            return [g for g in self.gpus if g.uuid not in self._unhealthy]

    def health(self) -> tuple[int, float, list[tuple[GpuInfo, str | None]]]:
        """(version, when it last changed, [(GPU, None when healthy, else why not)])."""
        with self._cond:
            states = [(g, self._unhealthy.get(g.uuid)) for g in self.gpus]
            return self._version, self._updated, states

    def set_health(self, uuid: str, healthy: bool, reason: str = "") -> bool:
        """Mark a GPU; returns whether that changed anything (then `on_change` runs)."""
        with self._cond:
            before = uuid in self._unhealthy
            if healthy:
                self._unhealthy.pop(uuid, None)
            elif any(g.uuid == uuid for g in self.gpus):
                self._unhealthy[uuid] = reason or "unhealthy"
            changed = before != (uuid in self._unhealthy)
            if changed:
                self._version += 1
                self._updated = time.time()
                self._cond.notify_all()
        if changed:
            self.on_change()
        return changed

    def wait_for_change(self, version: int, timeout: float) -> int:
        """Block until the health version differs from `version` or `timeout`; the version."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != version, timeout)
            return self._version
