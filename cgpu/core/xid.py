"""GPU health from NVML XID events: the rules the device plugin and the DRA driver share.

A critical XID makes a GPU unhealthy, except application errors (XIDs 13, 31, 43, 45, 68,
109, and any the operator adds), which a program causes and the GPU survives. A GPU is healthy
again after `recovery` seconds without a further critical XID, provided NVML still answers for
it (a GPU that fell off the bus does not). With recovery 0 it stays unhealthy until the
component restarts. What "unhealthy" means (devices advertised Unhealthy, or a GPU withdrawn
from a ResourceSlice) is the caller's `set_health`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

import pynvml

log = logging.getLogger(__name__)

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
WAIT_MS = 500

SetHealth = Callable[[str, bool, str], bool]
"""(uuid, healthy, reason) -> whether the GPU's health changed."""


def probe(uuid: str) -> bool:
    """Whether NVML still answers for the GPU (asked before declaring it healthy again)."""
    try:
        pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByUUID(uuid))
    except pynvml.NVMLError:
        return False
    return True


class XidWatcher:
    """A thread that waits for XID events on some GPUs and applies the rules above."""

    def __init__(
        self,
        uuids: Callable[[], list[str]],
        set_health: SetHealth,
        recovery: float,
        ignore: Iterable[int] = (),
        probe: Callable[[str], bool] = probe,
    ) -> None:
        self.uuids = uuids
        self.set_health = set_health
        self.recovery = recovery
        self.ignore = APPLICATION_XIDS | frozenset(ignore)
        self.probe = probe
        self._last_fault: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="xid-health", daemon=True)

    def start(self) -> None:
        """Start watching."""
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (returns within about half a second)."""
        self._stop.set()
        self._thread.join(timeout=2)

    def record(self, uuid: str, xid: int, now: float | None = None) -> bool:
        """Apply one XID to a GPU; returns whether it counted as critical."""
        if xid in self.ignore:
            log.info("GPU %s: XID %d is an application error; health unchanged", uuid, xid)
            return False
        self._last_fault[uuid] = time.monotonic() if now is None else now
        if self.set_health(uuid, False, f"critical XID {xid}"):
            log.warning("GPU %s: critical XID %d, now Unhealthy", uuid, xid)
        return True

    def recover(self, now: float | None = None) -> list[str]:
        """Make healthy the GPUs quiet for `recovery` seconds that NVML still answers for."""
        if self.recovery <= 0:
            return []
        now = time.monotonic() if now is None else now
        back = []
        for uuid, when in list(self._last_fault.items()):
            if now - when >= self.recovery and self.probe(uuid):
                del self._last_fault[uuid]
                if self.set_health(uuid, True, ""):
                    log.warning(
                        "GPU %s: no critical XID for %.0fs, Healthy again", uuid, now - when
                    )
                    back.append(uuid)
        return back

    def _register(self) -> object | None:
        event_set = pynvml.nvmlEventSetCreate()
        registered = 0
        for uuid in self.uuids():
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
                pynvml.nvmlDeviceRegisterEvents(
                    handle, pynvml.nvmlEventTypeXidCriticalError, event_set
                )
                registered += 1
            except pynvml.NVMLError as err:
                log.warning("GPU %s: XID events unavailable (%s); not health-checked", uuid, err)
        return event_set if registered else None

    def _run(self) -> None:
        try:
            event_set = self._register()
        except pynvml.NVMLError as err:
            log.warning("NVML events unavailable (%s); GPU health is not checked", err)
            return
        if event_set is None:
            return
        log.info("watching XID events on %d GPUs", len(self.uuids()))
        while not self._stop.is_set():
            try:
                data = pynvml.nvmlEventSetWait(event_set, WAIT_MS)
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
        """Apply an XID to its GPU, or to every GPU when NVML does not say which."""
        try:
            uuid = pynvml.nvmlDeviceGetUUID(device) if device else None
        except pynvml.NVMLError:
            uuid = None
        if uuid is None:
            for each in self.uuids():
                self.record(each, xid)
        else:
            self.record(uuid.decode() if isinstance(uuid, bytes) else uuid, xid)
