"""Which container each GPU process belongs to, as the host sees it, for the compute host view.

The arbiter's connected peers (`SO_PEERCRED` on a container's own socket) are placed first; every
other process NVML lists is placed by the memory host view's rules (`cgpu.core.hostview`):
its pid namespace (that of a peer, or of the init process meta.json records), its cgroup (the
container ID meta.json records) or the ledger file it sees. All of these are host evidence
(trusted). The ledger's own slots (the container's word) are not used here: a process placed only
by them would be judged, charged and stopped on its container's say.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from cgpu.core.containers import MetaError
from cgpu.core.filecache import MetaCache
from cgpu.core.hostview import Attributor, ContainerUsage, GpuProcess
from cgpu.core.layout import LEDGER_NAME

log = logging.getLogger(__name__)

Owner = tuple[str, int]  # (container directory, the process's start time)
REUSE_S = 1.0  # an unchanged set of processes is placed again after this long


class ComputeAttributor:
    """{host pid: (container, start time)} for the processes on each GPU; trusted only."""

    def __init__(self, attributor: Attributor | None = None) -> None:
        self._attributor = attributor or Attributor()
        self._meta = MetaCache()
        self._last: tuple[object, float, dict[int, Owner]] | None = None

    def attribute(
        self,
        containers: Iterable[str],
        running: Mapping[str, set[int]],
        peers: Mapping[int, str],
    ) -> dict[int, Owner]:
        """Place the pids `running` on each GPU and the connected `peers` ({pid: container}):
        the last answer while the containers, the processes and the peers are the same, for up
        to REUSE_S (a pid reused within that time is seen by its start time at the next look;
        the NVML thread asks every 100 ms, and placing is /proc reads per process)."""
        key = (
            frozenset(containers),
            frozenset((uuid, frozenset(pids)) for uuid, pids in running.items()),
            frozenset(peers.items()),
        )
        now = time.monotonic()
        if self._last is not None and self._last[0] == key and now - self._last[1] < REUSE_S:
            return dict(self._last[2])
        owners = self._place(key[0], running, peers)
        self._last = (key, now, owners)
        return dict(owners)

    def _place(
        self,
        containers: Iterable[str],
        running: Mapping[str, set[int]],
        peers: Mapping[int, str],
    ) -> dict[int, Owner]:
        """Place every process afresh by the host rules."""
        dirs = sorted(set(containers))
        usage = [self._usage(d) for d in dirs]
        self._meta.retain(dirs)
        gpu_processes = {
            uuid: [GpuProcess(pid, 0) for pid in sorted(pids)] for uuid, pids in running.items()
        }
        # The peers' GPU is not needed to place them: list them on a GPU of their own.
        gpu_processes[""] = [GpuProcess(pid, 0) for pid in sorted(peers)]
        view = self._attributor.attribute(usage, gpu_processes, anchors=peers)
        owners: dict[int, Owner] = {}
        for (key, _uuid), procs in view.processes.items():
            for proc in procs:
                if proc.trusted:
                    owners[proc.pid] = (key, proc.start_time)
        return owners

    def _usage(self, container_dir: str) -> ContainerUsage:
        """The container as the host rules need it: its meta.json and its ledger file's id."""
        try:
            meta = self._meta.get(container_dir) or {}
        except (MetaError, OSError) as err:
            log.debug("%s: meta.json not used: %s", container_dir, err)
            meta = {}
        try:
            st = os.stat(Path(container_dir, LEDGER_NAME))
            ledger_id: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            ledger_id = None
        return ContainerUsage(key=container_dir, meta=meta, devices=(), ledger_id=ledger_id)
