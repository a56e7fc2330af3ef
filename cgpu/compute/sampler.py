"""The arbiter's NVML thread: every NVML call the arbiter makes is made here, never on the thread
that hands out turns.

The arbiter's thread publishes a `Snapshot` (its hold log, who is connected) every ~100 ms and
takes the latest `Report` (each GPU's unmanaged load and probe, out-of-turn charges, the host
view and the processes of flagged containers). Both exchanges hold a lock only to swap small
values, so the arbiter never waits for NVML: a call that hangs (a GPU fallen off the bus) leaves
the last report in place, and turns go on with the last load estimate.

Each cycle (every `interval` s, or at a new snapshot) reads, per GPU: the compute processes, the
device's busy samples (through `UnmanagedLoad`, as before), and the per-process samples since the
last period read, which `outofturn.Judge` weighs against the holds, once the snapshot's hold log
covers the period.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from .attribution import ComputeAttributor
from .outofturn import TOLERANCE_NS, Judge, Period, Verdict
from .turnstate import Hold
from .unmanaged import BusySource, HeldNs, ProcessSource, UnmanagedLoad

log = logging.getLogger(__name__)

US = 1000
INTERVAL_S = 0.04  # a cycle at least every 40 ms: one NVML period (1/6 s) read at a time
HOLD_LOOKBACK_NS = 4_000_000_000  # the hold log a snapshot carries (the schedule keeps 5 s)
MAX_PERIOD_US = 1_000_000  # a gap in the samples longer than this is not one period
Proc = tuple[int, int]  # (host pid, start time)


@dataclass(frozen=True)
class GpuSnapshot:
    """One GPU as the arbiter's thread saw it."""

    holds: tuple[Hold, ...]  # since the snapshot's `holds_from`, the current one last
    managed: frozenset[int]  # pids of the connected processes that use it
    containers: tuple[str, ...]  # the containers with a limit on it


@dataclass(frozen=True)
class Snapshot:
    """What the NVML thread needs from the arbiter's thread, copied."""

    now: int  # arbiter ns (monotonic)
    offset: int  # arbiter ns minus CLOCK_REALTIME ns
    holds_from: int  # the hold logs cover [holds_from, now]
    gpus: Mapping[str, GpuSnapshot]
    peers: Mapping[int, str]  # connected pid -> container


@dataclass(frozen=True)
class HostFigures:
    """The host view of one GPU."""

    available: bool  # NVML's per-process samples could be read
    containers: Mapping[str, Verdict]


@dataclass
class Report:
    """What one cycle found, for the arbiter's thread."""

    at: int  # the `now` of the snapshot it was made from
    loads: dict[str, float] = field(default_factory=dict)
    probes: dict[str, int] = field(default_factory=dict)  # uuid -> gap ns, once
    charges: list[tuple[str, str, int]] = field(default_factory=list)  # uuid, container, ns
    host: dict[str, HostFigures] = field(default_factory=dict)
    targets: dict[str, tuple[Proc, ...]] = field(default_factory=dict)  # flagged container
    # (uuid, container) -> its processes on that GPU that are no connection's peer
    unhooked: dict[tuple[str, str], list[Proc]] = field(default_factory=dict)


@dataclass
class _Raw:
    start_us: int
    end_us: int
    busy: int  # percent
    named: dict[int, int] = field(default_factory=dict)  # pid -> percent


class _Periods:
    """The NVML periods of one GPU read so far and not judged yet."""

    def __init__(self) -> None:
        self.cursor_us: int | None = None  # the end of the newest period read
        self.period_us = 166_667
        self.pending: list[_Raw] = []

    def read(self, source: ProcessSource, uuid: str) -> None:
        """Read the periods closed since the last read, with the processes named in each."""
        device = source.busy_samples(uuid, self.cursor_us or 0)
        if self.cursor_us is None:  # the history before this arbiter: only where it ends
            if device:
                self.cursor_us = device[-1][0]
            return
        new: list[_Raw] = []
        prev = self.cursor_us
        for end, busy in device:
            if end <= prev:
                continue
            if end - prev <= MAX_PERIOD_US:
                self.period_us = end - prev
            new.append(_Raw(max(prev, end - self.period_us), end, busy))
            prev = end
        if not new:
            return
        processes = source.process_samples(uuid, self.cursor_us)
        for pid, stamp, percent in processes:
            for raw in new:  # the period that holds its stamp; newer ones are read next time
                if raw.start_us < stamp <= raw.end_us:
                    raw.named[pid] = raw.named.get(pid, 0) + percent
                    break
        self.cursor_us = prev
        self.pending += new


class Sampler:
    """The NVML thread. `cycle` is the work of one pass, callable directly (tests)."""

    def __init__(
        self,
        source: BusySource | None,
        attributor: ComputeAttributor | None = None,
        interval_s: float = INTERVAL_S,
        tolerance_ns: int = TOLERANCE_NS,
    ) -> None:
        self.source = source
        self.interval_s = interval_s
        self.tolerance_ns = tolerance_ns
        self._unmanaged = UnmanagedLoad(source)
        self._attributor = attributor or ComputeAttributor()
        self._judges: dict[str, Judge] = {}
        self._periods: dict[str, _Periods] = {}
        self._probes: dict[str, int] = {}
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._report: Report | None = None
        self._charges: list[tuple[str, str, int]] = []
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cgpu-nvml", daemon=True)
        self._failed: set[str] = set()

    # --- the arbiter's side: never waits on NVML ----------------------------------------------

    def start(self) -> None:
        """Start the thread (nothing to do without a source)."""
        if self.source is not None:
            self._thread.start()

    def stop(self, timeout_s: float = 1.0) -> bool:
        """Ask the thread to end and wait up to `timeout_s`; whether it ended (a thread stuck in
        NVML is left behind, as a daemon)."""
        self._stopping.set()
        self._wake.set()
        if not self._thread.is_alive():
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def publish(self, snapshot: Snapshot) -> None:
        """Hand the thread the arbiter's latest state."""
        with self._lock:
            self._snapshot = snapshot
        self._wake.set()

    def take(self) -> Report | None:
        """The latest report (None before the first), with the charges and probes not taken yet."""
        with self._lock:
            report, charges, probes = self._report, self._charges, self._probes
            self._charges, self._probes = [], {}
        if report is None:
            return None
        return Report(
            report.at, report.loads, probes, charges, report.host, report.targets, report.unhooked
        )

    # --- the NVML thread -------------------------------------------------------------------

    def _run(self) -> None:
        done = None
        while not self._stopping.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            with self._lock:
                snapshot = self._snapshot
            if snapshot is None or self._stopping.is_set():
                continue
            fresh = snapshot is not done
            try:
                report = self.cycle(snapshot, fresh=fresh)
            except Exception:  # a bug here must not end the thread
                log.exception("the NVML thread's cycle failed")
                continue
            done = snapshot
            with self._lock:
                if not fresh and self._report is not None:
                    report.loads = self._report.loads  # not polled again: the last still holds
                self._report = report
                self._charges += report.charges
                for uuid, gap in report.probes.items():
                    self._probes[uuid] = max(gap, self._probes.get(uuid, 0))

    def cycle(self, snapshot: Snapshot, fresh: bool = True) -> Report:
        """One pass over every GPU of the snapshot (`fresh`: a snapshot not seen before: the
        unmanaged load is polled; else only the per-process samples are read)."""
        report = Report(snapshot.now)
        source = self.source
        for gone in [u for u in self._judges if u not in snapshot.gpus]:
            self._judges.pop(gone)
            self._periods.pop(gone, None)
            self._unmanaged.forget(gone)
        running: dict[str, set[int]] = {}
        for uuid, gpu in snapshot.gpus.items():
            self._judges.setdefault(uuid, Judge(self.tolerance_ns))
            if source is None:
                continue
            if fresh:
                load = self._unmanaged.poll(
                    uuid, set(gpu.managed), _held(gpu.holds), snapshot.offset, snapshot.now
                )
                report.loads[uuid] = load
                gap = self._unmanaged.probe_gap(uuid, snapshot.now)
                if gap:
                    report.probes[uuid] = gap
            running[uuid] = self._read(source, uuid)
        owners = self._attributor.attribute(
            [c for gpu in snapshot.gpus.values() for c in gpu.containers],
            {u: pids | self._named_pids(u) for u, pids in running.items()},
            snapshot.peers,
        )
        for uuid, gpu in snapshot.gpus.items():
            judge = self._judges[uuid]
            judge.retain(gpu.containers)
            for name, ns in self._judge(uuid, judge, gpu, snapshot, owners).items():
                report.charges.append((uuid, name, ns))
            present = {owners[p][0] for p in running.get(uuid, set()) if p in owners}
            present |= set(snapshot.peers.values())
            for name in judge.flagged() - present:  # its processes are gone: start afresh
                judge.clear(name)
            available = source is not None and uuid in running and uuid not in self._failed
            verdicts = {name: judge.verdict(name, snapshot.now) for name in gpu.containers}
            report.host[uuid] = HostFigures(available, verdicts)
        flagged = {name for judge in self._judges.values() for name in judge.flagged()}
        on_gpu = set().union(*running.values()) if running else set()
        for name in flagged:
            procs = [
                (pid, started)
                for pid, (owner, started) in owners.items()
                if owner == name and (pid in on_gpu or pid in snapshot.peers)
            ]
            report.targets[name] = tuple(sorted(procs))
        for uuid, pids in running.items():
            for pid in sorted(pids - snapshot.peers.keys()):
                if pid in owners:
                    name, started = owners[pid]
                    report.unhooked.setdefault((uuid, name), []).append((pid, started))
        return report

    def _read(self, source: BusySource, uuid: str) -> set[int]:
        """The GPU's compute processes, and its new periods (when the source names processes);
        an empty set, the GPU marked failed, when NVML fails."""
        try:
            pids = source.running_pids(uuid)
            if hasattr(source, "process_samples"):
                periods = self._periods.setdefault(uuid, _Periods())
                periods.read(cast(ProcessSource, source), uuid)
        except Exception as err:  # NVMLError and kin: a GPU lost, a call not supported
            if uuid not in self._failed:
                log.warning("NVML failed for %s, no host view of its compute: %s", uuid, err)
            self._failed.add(uuid)
            return set()
        if not hasattr(source, "process_samples"):
            self._failed.add(uuid)
        else:
            self._failed.discard(uuid)
        return pids

    def _named_pids(self, uuid: str) -> set[int]:
        periods = self._periods.get(uuid)
        return {pid for raw in periods.pending for pid in raw.named} if periods else set()

    def _judge(
        self,
        uuid: str,
        judge: Judge,
        gpu: GpuSnapshot,
        snapshot: Snapshot,
        owners: Mapping[int, tuple[str, int]],
    ) -> dict[str, int]:
        """Judge the pending periods the hold log now covers; the charges, summed."""
        periods = self._periods.get(uuid)
        charges: dict[str, int] = {}
        if periods is None:
            return charges
        keep: list[_Raw] = []
        for raw in periods.pending:
            start = raw.start_us * US + snapshot.offset
            end = raw.end_us * US + snapshot.offset
            if start - self.tolerance_ns < snapshot.holds_from:
                continue  # older than the hold log: cannot be judged
            if end + self.tolerance_ns > snapshot.now:
                keep.append(raw)  # its holds are not all known yet
                continue
            named: dict[str, float] = {}
            for pid, percent in raw.named.items():
                owner = owners.get(pid)
                if owner is not None:
                    named[owner[0]] = named.get(owner[0], 0.0) + percent / 100
            period = Period(start, end, raw.busy / 100, named)
            for name, ns in judge.add(period, gpu.holds, gpu.containers).items():
                charges[name] = charges.get(name, 0) + ns
        periods.pending = keep
        return charges


def _held(holds: tuple[Hold, ...]) -> HeldNs:
    """held(start, end): how long some container held the token within [start, end]."""

    def held(start: int, end: int) -> int:
        return sum(max(0, min(end, h.end) - max(start, h.start)) for h in holds)

    return held
