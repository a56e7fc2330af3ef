"""The GPUs of this node as NVML reports them: index, model, total and used memory.

NVML is optional. Without the library, a driver or a GPU the exporter still serves every container
series; it only loses the GPU series and the `gpu_index` label. Initialisation is retried lazily,
at most once per `retry_interval` seconds, so a driver that appears later is picked up.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GpuStatus:
    """One GPU at one scrape. `total` and `used` are None when NVML could not read them."""

    uuid: str
    index: int
    model: str
    total: int | None
    used: int | None

    @property
    def healthy(self) -> bool:
        """Whether NVML answered for this GPU at this scrape."""
        return self.total is not None


@dataclass(frozen=True)
class _Device:
    uuid: str
    index: int
    model: str
    handle: Any


def _import_pynvml() -> ModuleType:
    return importlib.import_module("pynvml")


class NvmlSource:
    """A cached NVML session: handles and static facts are read once, memory on every call."""

    def __init__(
        self,
        retry_interval: float = 30.0,
        loader: Callable[[], ModuleType] = _import_pynvml,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._retry_interval = retry_interval
        self._loader = loader
        self._clock = clock
        self._nvml: ModuleType | None = None
        self._devices: list[_Device] | None = None
        self._next_try = 0.0
        self._last_error = ""

    @property
    def up(self) -> bool:
        """Whether NVML is initialised and listed the devices."""
        return self._devices is not None

    @property
    def last_error(self) -> str:
        """Why NVML is down, for logs and docs; empty when it is up."""
        return self._last_error

    def gpus(self) -> list[GpuStatus]:
        """Every GPU with its memory now; [] while NVML is unavailable."""
        devices = self._ensure()
        if devices is None:
            return []
        nvml = self._nvml
        assert nvml is not None
        result = []
        failed = 0
        for dev in devices:
            try:
                mem = nvml.nvmlDeviceGetMemoryInfo(dev.handle)
                result.append(
                    GpuStatus(dev.uuid, dev.index, dev.model, int(mem.total), int(mem.used))
                )
            except Exception as exc:  # NVMLError subclasses: GPU lost, reset, unknown
                failed += 1
                log.warning("NVML memory query failed for %s: %s", dev.uuid, exc)
                result.append(GpuStatus(dev.uuid, dev.index, dev.model, None, None))
        if devices and failed == len(devices):
            # Every GPU failed: the driver may have been reloaded; start over on the next scrape
            # (the GPUs stay listed as unhealthy for this one).
            self._reset("every GPU query failed")
        return result

    def uuid_to_index(self) -> dict[str, int]:
        """{uuid: NVML index} from the cached device list (no NVML call)."""
        return {d.uuid: d.index for d in self._devices or ()}

    def close(self) -> None:
        """Shut NVML down if this source initialised it."""
        self._reset("closed")

    def _ensure(self) -> list[_Device] | None:
        if self._devices is not None:
            return self._devices
        now = self._clock()
        if now < self._next_try:
            return None
        self._next_try = now + self._retry_interval
        try:
            nvml = self._nvml or self._loader()
            nvml.nvmlInit()
            self._nvml = nvml
            devices = []
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                devices.append(
                    _Device(
                        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                        index=index,
                        model=_text(nvml.nvmlDeviceGetName(handle)),
                        handle=handle,
                    )
                )
        except Exception as exc:  # ImportError, NVMLError (library or driver missing), OSError
            if self._last_error != str(exc):
                log.warning(
                    "NVML unavailable (retrying every %.0fs): %s", self._retry_interval, exc
                )
            self._last_error = str(exc) or type(exc).__name__
            self._shutdown()
            return None
        self._devices = devices
        self._last_error = ""
        log.info("NVML up: %d GPU(s)", len(devices))
        return devices

    def _reset(self, why: str) -> None:
        if self._devices is not None:
            log.warning("NVML reset: %s", why)
        self._devices = None
        self._last_error = why
        self._shutdown()

    def _shutdown(self) -> None:
        if self._nvml is None:
            return
        # Not initialised, or the library went away: nothing to release either way.
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
