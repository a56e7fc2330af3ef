"""`cgpu exporter --enforce`: SIGKILL the GPU processes of a container that stays over its slice.

A container is over its slice on a GPU when the memory NVML shows for its processes there, as
placed by the host rules alone (`Attributed.trusted`), exceeds the slice by more than the
allowance. After `grace` seconds of being over at every check, each of its trusted processes
holding memory on that GPU is killed: through a pidfd opened before its start time is checked
again, so a recycled pid is never hit. A container within its slice is never touched, and a
process placed only by a container's own ledger never is.
"""

from __future__ import annotations

import logging
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cgpu.core.hostview import ContainerUsage, HostView
from cgpu.core.procfs import signal_process

log = logging.getLogger(__name__)

KillLabels = tuple[str, str, str, str, str]  # namespace, pod, container, gpu_uuid, gpu_index


def kill_process(pid: int, started: int) -> bool:
    """SIGKILL `pid` if it is still the process that started at `started`; whether it was sent."""
    return signal_process(pid, started, signal.SIGKILL)


@dataclass(frozen=True)
class Over:
    """A container directory over its slice on one GPU at one check."""

    key: str
    uuid: str
    limit: int
    used: int


def over_slice(
    containers: Iterable[ContainerUsage], view: HostView, allowance: int, trusted_only: bool
) -> list[Over]:
    """Every (container, GPU) whose host-observed use exceeds its slice by more than `allowance`."""
    found = []
    for usage in containers:
        for dev in usage.devices:
            if dev.uuid not in view.gpus:
                continue
            used = view.used(usage.key, dev.uuid, trusted_only)
            if used > dev.limit + allowance:
                found.append(Over(usage.key, dev.uuid, dev.limit, used))
    return found


class Enforcer:
    """Remembers since when each container has been over, and kills after the grace period."""

    def __init__(
        self,
        grace: float,
        allowance: int,
        kill: Callable[[int, int], bool] = kill_process,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._grace = grace
        self._allowance = allowance
        self._kill = kill
        self._clock = clock
        self._since: dict[tuple[str, str], float] = {}
        self.kills: Counter[KillLabels] = Counter()

    def check(
        self,
        containers: list[ContainerUsage],
        view: HostView,
        labels: Callable[[str, str], KillLabels],
    ) -> list[int]:
        """One check: start, continue or end each container's over-slice period; returns the
        pids killed now. `labels(key, uuid)` names a container's series."""
        now = self._clock()
        over = over_slice(containers, view, self._allowance, trusted_only=True)
        current = {(o.key, o.uuid) for o in over}
        self._since = {k: t for k, t in self._since.items() if k in current}
        killed: list[int] = []
        for o in over:
            since = self._since.setdefault((o.key, o.uuid), now)
            if now - since < self._grace:
                continue
            for proc in view.processes.get((o.key, o.uuid), []):
                if not proc.trusted or proc.used <= 0:
                    continue
                if self._kill(proc.pid, proc.start_time):
                    killed.append(proc.pid)
                    self.kills[labels(o.key, o.uuid)] += 1
                    log.warning(
                        "killed pid %d of container %s: it holds %d bytes on %s, and the "
                        "container has used %d bytes there (slice %d) for %.0f s",
                        proc.pid, o.key, proc.used, o.uuid, o.used, o.limit, now - since,
                    )  # fmt: skip
            self._since[(o.key, o.uuid)] = now  # another full grace before the next kill
        return killed
