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

from cgpu.core.gpus import nvml_text
from cgpu.core.hostview import GpuProcess

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


# The process-list calls, newest first, as nvidia-ml-py names them; a driver without the newer
# entry point answers NVML_ERROR_FUNCTION_NOT_FOUND and the next one is tried.
PROCESS_CALLS = {
    "compute": (
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses",
    ),
    "graphics": (
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v2",
        "nvmlDeviceGetGraphicsRunningProcesses",
    ),
}
_FUNCTION_NOT_FOUND = 13  # NVML_ERROR_FUNCTION_NOT_FOUND
# usedGpuMemory is NVML_VALUE_NOT_AVAILABLE (~0ULL) where the driver cannot tell.
_NOT_AVAILABLE = (1 << 64) - 1


def _used(info: Any) -> int:
    value = getattr(info, "usedGpuMemory", None)
    if not isinstance(value, int) or value < 0 or value >= _NOT_AVAILABLE:
        return 0
    return value


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
        self._initialised = False
        self._devices: list[_Device] = []  # last known GPUs, kept while NVML is down
        self._next_try = 0.0
        self._last_error = ""
        self._process_calls = {kind: list(names) for kind, names in PROCESS_CALLS.items()}

    @property
    def up(self) -> bool:
        """Whether NVML is initialised and answering."""
        return self._initialised

    @property
    def last_error(self) -> str:
        """Why NVML is down, for logs; empty when it is up."""
        return self._last_error

    def gpus(self) -> list[GpuStatus]:
        """Every GPU with its memory now.

        While NVML is down, the GPUs it listed before are returned as unhealthy (total and used
        None), so an alert on them keeps firing; with no NVML ever, the list is empty.
        """
        if not self._initialised:
            self._try_init()
        if not self._initialised:
            return [GpuStatus(d.uuid, d.index, d.model, None, None) for d in self._devices]
        nvml = self._nvml
        assert nvml is not None
        result = []
        for dev in self._devices:
            try:
                mem = nvml.nvmlDeviceGetMemoryInfo(dev.handle)
                status = GpuStatus(dev.uuid, dev.index, dev.model, int(mem.total), int(mem.used))
            except Exception as exc:  # NVMLError subclasses: GPU lost, reset, unknown
                log.warning("NVML memory query failed for %s: %s", dev.uuid, exc)
                status = GpuStatus(dev.uuid, dev.index, dev.model, None, None)
            result.append(status)
        if result and not any(g.healthy for g in result):
            # Every GPU failed: the driver may have been reloaded. Start a new NVML session
            # after the retry interval; the GPUs stay listed as unhealthy meanwhile.
            self._shutdown("every GPU query failed")
        return result

    def processes(self) -> dict[str, list[GpuProcess]]:
        """{GPU uuid: its compute and graphics processes}, for the GPUs that answered.

        Empty while NVML is down. A GPU whose list NVML refuses is left out (its host view
        is unknown at this pass, not empty).
        """
        if not self._initialised:
            return {}
        result: dict[str, list[GpuProcess]] = {}
        for dev in self._devices:
            try:
                found: dict[int, GpuProcess] = {}
                for kind in PROCESS_CALLS:
                    listed = self._list(kind, dev.handle)
                    if listed is None and kind == "compute":
                        raise LookupError("this NVML cannot list compute processes")
                    for info in listed or []:
                        pid = int(info.pid)
                        if pid not in found or _used(info) > found[pid].used:
                            found[pid] = GpuProcess(pid, _used(info))
            except Exception as exc:  # NVMLError: GPU lost, not supported
                log.debug("NVML process list failed for %s: %s", dev.uuid, exc)
                continue
            result[dev.uuid] = list(found.values())
        return result

    def _list(self, kind: str, handle: Any) -> list[Any] | None:
        """One process list, through the newest call this NVML has; None when it has none."""
        nvml = self._nvml
        calls = self._process_calls[kind]
        while calls:
            call = getattr(nvml, calls[0], None)
            try:
                if call is None:
                    raise AttributeError(calls[0])
                return list(call(handle))
            except AttributeError:
                calls.pop(0)
            except Exception as exc:
                if getattr(exc, "value", None) != _FUNCTION_NOT_FOUND or len(calls) == 1:
                    raise
                calls.pop(0)
        return None

    def uuid_to_index(self) -> dict[str, int]:
        """{uuid: NVML index} of the known GPUs (no NVML call)."""
        return {d.uuid: d.index for d in self._devices}

    def close(self) -> None:
        """Shut NVML down if this source initialised it."""
        self._shutdown("closed")

    def _try_init(self) -> None:
        now = self._clock()
        if now < self._next_try:
            return
        self._next_try = now + self._retry_interval
        try:
            nvml = self._nvml or self._loader()
            self._nvml = nvml
            nvml.nvmlInit()
            self._initialised = True
            devices = []
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = nvml_text(nvml.nvmlDeviceGetUUID(handle))
                model = nvml_text(nvml.nvmlDeviceGetName(handle))
                devices.append(_Device(uuid, index, model, handle))
        except Exception as exc:  # ImportError, NVMLError (library or driver missing), OSError
            if self._last_error != str(exc):
                log.warning("NVML unavailable (retry every %.0fs): %s", self._retry_interval, exc)
            self._shutdown(str(exc) or type(exc).__name__)
            return
        self._devices = devices
        self._last_error = ""
        log.info("NVML up: %d GPU(s)", len(devices))

    def _shutdown(self, why: str) -> None:
        self._last_error = why
        if not self._initialised:
            return
        self._initialised = False
        assert self._nvml is not None
        # The library may already be gone: nothing to release then.
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()
