"""The host's view: which container each GPU process NVML reports belongs to, and its use.

A program can skip the shim (a static binary, raw ioctls, a zeroed ledger), but NVML on the host
still lists every process holding device memory. Each host pid is attributed to a container
directory by these rules, strongest first:

1. Host evidence about the process itself (`trusted`):
   - the file it sees at /var/run/cgpu/cgpu.ledger, resolved inside its own root, is the host's
     `<state>/containers/<key>/cgpu.ledger` (same st_dev and st_ino): the runtime bind-mounted
     that directory into it;
   - its cgroup path has the container ID meta.json records (written by the host, read-only
     in the container) as a whole path component or a runtime's `<prefix>-<id>.scope` name.
   When the two disagree, the process is left unattributed.
2. Its pid namespace (`trusted`): a namespace holds the processes of one container, so a process
   whose namespace is that of a process attributed by rule 1, or of the init process the hook
   recorded in meta.json (pid and start time, checked against /proc), belongs to the same
   container. Never the host's own namespace, and never a namespace claimed by two containers
   (a pod with a shared process namespace).
3. The container's ledger (not trusted): a live slot whose pid and start time equal the process's
   pid in its own namespace (`NSpid`) and its start time. The ledger is the container's own file,
   so this rule only applies to a process no host rule placed, and only when a single container
   claims it. A container can use it to claim someone else's process, which only adds to its
   own figures: it can never move a process away from the container the host rules name.

A caller that knows some processes for sure (the compute arbiter: the peers that connected to a
container's own socket, `SO_PEERCRED`) passes them as `anchors`: they are placed first, trusted,
and anchor their pid namespaces as rule 1's processes do.

A process no rule places is unattributed (a GPU-level figure). Enforcement acts only on trusted
attributions (see `cgpu.exporter.enforce`).

The exporter (its host-view series, `--enforce`) and the compute arbiter
(`cgpu.compute.attribution`) share these rules. What they are given: each GPU's processes as NVML
lists them (`GpuProcess`) and each container directory as a pass over the state dir reads it
(`ContainerUsage`); the host's facts about a process come from `cgpu.core.procinfo`.
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cgpu.core.ledger import DeviceUsage, ProcessUsage
from cgpu.core.procfs import start_time
from cgpu.core.procinfo import HostProcess, inspect, own_pidns, pidns_of

_CONTAINER_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{12,128}$")
_SCOPE_RE = re.compile(r"^(?:[a-z0-9]+-)*(?P<id>[A-Za-z0-9_]{12,128})(?:\.scope)?$")


@dataclass(frozen=True)
class GpuProcess:
    """A host process holding memory on a GPU, as NVML lists it."""

    pid: int
    used: int  # bytes; 0 when NVML cannot tell (usedGpuMemory not available)


@dataclass(frozen=True)
class ContainerUsage:
    """One container directory as seen at this pass (an exporter scrape, an arbiter look).

    `processes` are the ledger's live slots (pids in the container's pid namespace, as the
    container wrote them); `ledger_id` is (st_dev, st_ino) of the host's ledger file, None
    when there is none. `ledger_ok` is False for a container whose ledger could not be read
    but whose `cgpu.conf` could: its slices are known (at 0 used), so the host view still
    covers it (a container cannot hide from it by breaking its own ledger), but it has no
    ledger figures.
    """

    key: str
    meta: Mapping[str, Any]
    devices: tuple[DeviceUsage, ...]
    processes: tuple[ProcessUsage, ...] = ()
    ledger_id: tuple[int, int] | None = None
    ledger_ok: bool = True


@dataclass(frozen=True)
class Attributed:
    """One host process of a container on one GPU."""

    pid: int
    start_time: int
    used: int
    trusted: bool


@dataclass
class HostView:
    """What NVML shows on each GPU, split by container directory key."""

    # (key, gpu uuid) -> the container's processes on that GPU
    processes: dict[tuple[str, str], list[Attributed]] = field(default_factory=dict)
    # gpu uuid -> bytes held by processes that belong to no known container
    unattributed: Counter[str] = field(default_factory=Counter)
    # GPUs whose process list NVML gave at this pass
    gpus: set[str] = field(default_factory=set)

    def used(self, key: str, uuid: str, trusted_only: bool = False) -> int:
        """Bytes the container's processes hold on the GPU, as NVML sees them."""
        procs = self.processes.get((key, uuid), [])
        return sum(p.used for p in procs if p.trusted or not trusted_only)


class ProcessCache:
    """Host facts per (pid, start time): a process's namespace, cgroup and root are read once.

    Entries of processes that are no longer listed are dropped at each pass.
    """

    def __init__(self, inspector: Callable[[int], HostProcess | None] = inspect) -> None:
        self._inspect = inspector
        self._entries: dict[int, HostProcess] = {}

    def get(self, pid: int) -> HostProcess | None:
        """The facts of the process now running as `pid` (None when there is none)."""
        cached = self._entries.get(pid)
        if cached is not None and start_time(pid) == cached.start_time:
            return cached
        fresh = self._inspect(pid)
        if fresh is None:
            self._entries.pop(pid, None)
        else:
            self._entries[pid] = fresh
        return fresh

    def retain(self, pids: Iterable[int]) -> None:
        """Forget every pid not in `pids`."""
        keep = set(pids)
        for pid in [p for p in self._entries if p not in keep]:
            del self._entries[pid]


@functools.lru_cache(maxsize=4096)
def _cgroup_ids(cgroup: str) -> frozenset[str]:
    """Container IDs a cgroup file names: whole components, or `<runtime>-<id>.scope`."""
    found = set()
    for line in cgroup.splitlines():
        path = line.split(":", 2)[-1]
        for part in path.split("/"):
            match = _SCOPE_RE.match(part)
            if match:
                found.add(match.group("id"))
    return frozenset(found)


def _unique(pairs: Iterable[tuple[object, str]]) -> dict[object, str]:
    """{fact: key} for facts that point at exactly one key."""
    seen: dict[object, set[str]] = defaultdict(set)
    for fact, key in pairs:
        seen[fact].add(key)
    return {fact: next(iter(keys)) for fact, keys in seen.items() if len(keys) == 1}


class Attributor:
    """Attributes NVML's processes to container directories, one pass per scrape."""

    def __init__(
        self,
        procs: ProcessCache | None = None,
        host_pidns: int | None = None,
        read_start_time: Callable[[int], int | None] = start_time,
    ) -> None:
        self._procs = procs or ProcessCache()
        self._host_pidns = own_pidns() if host_pidns is None else host_pidns
        self._start_time = read_start_time

    def attribute(
        self,
        containers: list[ContainerUsage],
        gpu_processes: Mapping[str, list[GpuProcess]],
        anchors: Mapping[int, str] | None = None,
    ) -> HostView:
        """Split every GPU's processes between `containers` (and unattributed); `anchors`:
        {host pid: container key} known for sure (they need not hold the GPU)."""
        view = HostView(gpus=set(gpu_processes))
        anchors = anchors or {}
        pids = {p.pid for procs in gpu_processes.values() for p in procs} | set(anchors)
        facts = {pid: f for pid in pids if (f := self._procs.get(pid)) is not None}
        self._procs.retain(pids)
        owner = self._owners(containers, facts, anchors)
        for uuid, procs in gpu_processes.items():
            for proc in procs:
                fact = facts.get(proc.pid)
                found = owner.get(proc.pid)
                if fact is None or found is None:
                    view.unattributed[uuid] += proc.used
                    continue
                key, trusted = found
                view.processes.setdefault((key, uuid), []).append(
                    Attributed(proc.pid, fact.start_time, proc.used, trusted)
                )
        return view

    def _owners(
        self,
        containers: list[ContainerUsage],
        facts: Mapping[int, HostProcess],
        anchors: Mapping[int, str],
    ) -> dict[int, tuple[str, bool]]:
        """{host pid: (container key, trusted)} for the processes some rule places."""
        by_ledger = _unique((c.ledger_id, c.key) for c in containers if c.ledger_id is not None)
        by_id = _unique(
            (cid, c.key)
            for c in containers
            if isinstance(cid := c.meta.get("container_id"), str) and _CONTAINER_ID_RE.match(cid)
        )
        owner: dict[int, tuple[str, bool]] = {
            pid: (key, True) for pid, key in anchors.items() if pid in facts
        }
        # Rule 1: the process's own mounts and cgroup.
        for pid, fact in facts.items():
            if pid in owner:
                continue
            keys = set()
            if fact.ledger_id is not None and fact.ledger_id in by_ledger:
                keys.add(by_ledger[fact.ledger_id])
            keys |= {by_id[cid] for cid in _cgroup_ids(fact.cgroup) if cid in by_id}
            if len(keys) == 1:
                owner[pid] = (keys.pop(), True)
            elif keys:
                owner[pid] = ("", False)  # contradicting host evidence: nobody's
        # Rule 2: pid namespaces of placed processes and of the hook's init processes.
        anchors = [(facts[pid].pidns, key) for pid, (key, _) in owner.items() if key]
        anchors += self._init_namespaces(containers)
        claimants: dict[int, set[str]] = defaultdict(set)
        for ns, key in anchors:
            if ns is not None and ns != self._host_pidns:
                claimants[ns].add(key)
        for pid, fact in facts.items():
            keys = claimants.get(fact.pidns) if fact.pidns is not None else None
            if pid not in owner and keys is not None and len(keys) == 1:
                owner[pid] = (next(iter(keys)), True)
        # Rule 3: the ledgers' live slots, for what no host rule placed. In a namespace the
        # host rules tie to containers, only one of those may claim a process.
        by_slot = _unique(
            ((proc.pid, proc.start_time), c.key) for c in containers for proc in c.processes
        )
        for pid, fact in facts.items():
            if pid in owner or fact.nspid is None:
                continue
            key = by_slot.get((fact.nspid, fact.start_time))
            keys = claimants.get(fact.pidns) if fact.pidns is not None else None
            if key is not None and (keys is None or key in keys):
                owner[pid] = (key, False)
        return {pid: found for pid, found in owner.items() if found[0]}

    def _init_namespaces(self, containers: list[ContainerUsage]) -> list[tuple[int | None, str]]:
        """(pid namespace, key) of the init processes the hook recorded and that still run."""
        found: list[tuple[int | None, str]] = []
        for c in containers:
            pid, started = c.meta.get("init_pid"), c.meta.get("init_start_time")
            live = isinstance(pid, int) and isinstance(started, int) and pid > 0
            if live and self._start_time(pid) == started:
                found.append((pidns_of(pid), c.key))
        return found
