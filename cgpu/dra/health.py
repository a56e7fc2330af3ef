"""GPU health from NVML XID events: an unhealthy GPU leaves the ResourceSlice.

A critical XID takes the GPU out of the published pool (no new claim lands on it), except
application errors (XIDs 13, 31, 43, 45, 68, 109), which a program causes and the GPU
survives, as in the device plugin. The GPU is published again after `recovery` seconds without
a further critical XID, provided NVML still answers for it; with recovery 0 it stays out until
the driver restarts.
"""

from __future__ import annotations

import logging
import threading
import time

import pynvml

from cgpu.dra.inventory import Inventory

log = logging.getLogger(__name__)

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
WAIT_MS = 500


def _probe(uuid: str) -> bool:
    try:
        pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByUUID(uuid))
    except pynvml.NVMLError:
        return False
    return True


class HealthWatcher:
    """A thread that waits for XID events and updates the inventory's health."""

    def __init__(self, inventory: Inventory, recovery: float) -> None:
        self.inventory = inventory
        self.recovery = recovery
        self._faults: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="xid-health", daemon=True)

    def start(self) -> None:
        """Start watching."""
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (returns within about half a second)."""
        self._stop.set()
        self._thread.join(timeout=2)

    def record(self, uuid: str, xid: int) -> None:
        """Apply one XID to a GPU."""
        if xid in APPLICATION_XIDS:
            log.info("GPU %s: XID %d is an application error; still published", uuid, xid)
            return
        self._faults[uuid] = time.monotonic()
        if self.inventory.set_health(uuid, False, f"critical XID {xid}"):
            log.warning("GPU %s: critical XID %d, withdrawn from the ResourceSlice", uuid, xid)

    def recover(self) -> None:
        """Publish again the GPUs quiet for `recovery` seconds that NVML still answers for."""
        if self.recovery <= 0:
            return
        now = time.monotonic()
        for uuid, when in list(self._faults.items()):
            if now - when >= self.recovery and _probe(uuid):
                del self._faults[uuid]
                if self.inventory.set_health(uuid, True):
                    log.warning("GPU %s: healthy again, published", uuid)

    def _run(self) -> None:
        try:
            events = pynvml.nvmlEventSetCreate()
            for gpu in self.inventory.gpus:
                handle = pynvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
                pynvml.nvmlDeviceRegisterEvents(
                    handle, pynvml.nvmlEventTypeXidCriticalError, events
                )
        except pynvml.NVMLError as err:
            log.warning("NVML events unavailable (%s); GPU health is not checked", err)
            return
        while not self._stop.is_set():
            try:
                data = pynvml.nvmlEventSetWait(events, WAIT_MS)
            except pynvml.NVMLError_Timeout:
                data = None
            except pynvml.NVMLError as err:
                log.warning("waiting for XID events failed (%s); retrying", err)
                self._stop.wait(1.0)
                data = None
            if data is not None and data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                self._on_event(data.device, int(data.eventData))
            self.recover()

    def _on_event(self, device: object, xid: int) -> None:
        try:
            uuid = pynvml.nvmlDeviceGetUUID(device) if device else None
        except pynvml.NVMLError:
            uuid = None
        if uuid is None:
            for gpu in self.inventory.gpus:
                self.record(gpu.uuid, xid)
        else:
            self.record(uuid.decode() if isinstance(uuid, bytes) else uuid, xid)
