"""The arbiter's NVML thread: every NVML call the arbiter makes is made here, never on the thread
that hands out turns.

The arbiter's thread publishes a `Snapshot` (its hold log, who is connected) every ~100 ms and
takes the latest `Report` (each GPU's unmanaged load and probe, out-of-turn charges, the host
view and the processes of flagged containers). Both exchanges hold a lock only to swap small
values, so the arbiter never waits for NVML: a call that hangs (a GPU fallen off the bus) leaves
the last report in place, and turns go on with the last load estimate.

A read, per GPU: the compute processes, the device's busy samples (through `UnmanagedLoad`) and
the per-process samples since the last period read, which `outofturn.Judge` weighs against the
holds once a snapshot's hold log covers the period (a snapshot wakes the thread only while read
periods wait for one). Reads are paced by NVML's own periods: one just after each period's
samples are out (PUBLISH_LAG_S after its end), so that each period is read alone and its
processes are its own (NVML gives one mean per process over all the periods asked for). While
nobody held a token since the last read and the periods read show the GPU idle, the thread reads
every IDLE_READ_S instead (NVML keeps 10 s of samples, and work out of turn makes the device busy:
the next read sees it and the pace returns to every period). While the judge has a suspect and
every process on the GPU is placed in one of its containers, a probe of CONFIRM_GAP of a period
is asked for (at most one per CONFIRM_EVERY_NS): busy time in it that no hold explains confirms
out-of-turn work (outofturn.py, Confirmation).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from .attribution import ComputeAttributor
from .outofturn import CONFIRMED_AT, TOLERANCE_NS, Judge, Period, Verdict, held_share
from .turnstate import Hold
from .unmanaged import BusySource, HeldNs, ProcessSource, UnmanagedLoad

log = logging.getLogger(__name__)

US = 1000
PUBLISH_LAG_S = 0.015  # a period's samples are read this long after it ends (the driver: 10 ms)
RETRY_S = 0.02  # a period due and not out yet is asked for again after this
MAX_WAIT_S = 0.5  # while busy, the longest wait between reads (the period not known yet)
IDLE_READ_S = 1.0  # while nothing ran and nobody held, NVML is read this often (it keeps 10 s)
STALE_WAIT_S = 0.15  # a read waits this long at most for a snapshot newer than its time
# A suspect's probe leaves the token free this share of a period. A fifth (33 ms) left 4 ms past
# the boundary slack and margin: the device's busy read 98-99% while saturated, and the first
# probe confirmed nothing in one run of three (flagged 3.5 s in, the goal 3 s).
CONFIRM_GAP = 0.3
CONFIRM_EVERY_NS = 2_000_000_000  # at most one such probe per GPU this often
# and this often while a suspect's W is past CONFIRMED_AT (a confirmation would flag it now: a
# probe that showed nothing, its work paused by chance, cost 2 s more; flagged at 4-6 s)
CONFIRM_AGAIN_NS = 1_000_000_000
LATE_DRAIN_NS = 1_000_000  # a drain this long after the REVOKE may have been forced to end
DRAIN_CAP_NS = 1_000_000_000  # and its end moved later until this long after (the drain cap)
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
    done: set[str] = field(default_factory=set)  # the containers it was judged for


class _Periods:
    """The NVML periods of one GPU read so far and not judged yet."""

    def __init__(self) -> None:
        self.cursor_us: int | None = None  # the end of the newest period read
        self.period_us = 166_667
        self.pending: list[_Raw] = []
        self.unplaced_us = 0  # periods that start before this may hold unplaced processes' work
        self.ran = True  # the newest periods read show the GPU busy
        self.probed_at = 0  # when a suspect's probe was last asked for (arbiter ns)

    def due_s(self) -> float:
        """CLOCK_REALTIME seconds at which the next period's samples are out."""
        if self.cursor_us is None:
            return 0.0
        return (self.cursor_us + self.period_us) / 1e6 + PUBLISH_LAG_S

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
        self.ran = any(raw.busy for raw in new)
        # (an idle GPU names nobody: not asked)
        processes = source.process_samples(uuid, self.cursor_us) if self.ran else []
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
        tolerance_ns: int = TOLERANCE_NS,
        idle_read_s: float = IDLE_READ_S,
    ) -> None:
        self.source = source
        self.tolerance_ns = tolerance_ns
        self.idle_read_s = idle_read_s
        self.idle = False  # nothing ran and nobody held at the last read: NVML read rarely
        self._last_read_ns: int | None = None  # the snapshot `now` of the last read
        self._awaiting = False  # periods read wait for a snapshot whose hold log covers them
        self._fresh_wanted = False  # a read is due: the next snapshot wakes the thread
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
        self._running: dict[str, set[int]] = {}  # each GPU's compute processes at the last read

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
            wake = self._awaiting or self._fresh_wanted or self._last_read_ns is None
            if self.idle and not wake:  # a hold since the last read: read at once
                since = self._last_read_ns or 0
                wake = any(
                    gpu.holds and gpu.holds[-1].end >= since for gpu in snapshot.gpus.values()
                )
        if wake:
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
        done: Snapshot | None = None
        due = 0.0  # CLOCK_REALTIME seconds of the next NVML read
        while not self._stopping.is_set():
            wait = None if done is None else max(0.0, due - time.time())
            if self._fresh_wanted:
                wait = STALE_WAIT_S
            self._wake.wait(wait)
            self._wake.clear()
            with self._lock:
                snapshot = self._snapshot
                self._fresh_wanted = False
            if snapshot is None or self._stopping.is_set():
                continue
            timed = time.time() >= due
            read = timed or self.idle  # (idle: woken by a hold)
            if timed and _wall_s(snapshot) < due and time.time() < due + STALE_WAIT_S:
                # The snapshot is older than the read's time: its hold log would not cover the
                # newest periods (time held would look free to the unmanaged load). The next.
                with self._lock:
                    self._fresh_wanted = True
                continue
            if not read and snapshot is done:
                continue
            try:
                report = self.cycle(snapshot, read=read)
            except Exception:  # a bug here must not end the thread
                log.exception("the NVML thread's cycle failed")
                due = time.time() + self.idle_read_s
                continue
            done = snapshot
            if read:
                due = time.time() + self._wait_s()
            with self._lock:
                if not read and self._report is not None:
                    report.loads = self._report.loads  # not polled again: the last still holds
                self._awaiting = any(p.pending for p in self._periods.values())
                self._report = report
                self._charges += report.charges
                for uuid, gap in report.probes.items():
                    self._probes[uuid] = max(gap, self._probes.get(uuid, 0))

    def _wait_s(self) -> float:
        """How long until the next read: IDLE_READ_S while idle, else until the next NVML
        period is out (one period a read, so each is judged with its own processes)."""
        if self.idle:
            return self.idle_read_s
        due = [p.due_s() for p in self._periods.values() if p.cursor_us is not None]
        if not due:
            return min(MAX_WAIT_S, self.idle_read_s)
        return min(MAX_WAIT_S, max(RETRY_S, min(due) - time.time()))

    def cycle(self, snapshot: Snapshot, read: bool = True) -> Report:
        """One pass over every GPU of the snapshot (`read`: NVML is read: the unmanaged load,
        the compute processes and the periods closed since; else the periods read before are
        judged against this snapshot's hold log)."""
        report = Report(snapshot.now)
        source = self.source
        for gone in [u for u in self._judges if u not in snapshot.gpus]:
            self._judges.pop(gone)
            self._periods.pop(gone, None)
            self._running.pop(gone, None)
            self._unmanaged.forget(gone)
        for uuid, gpu in snapshot.gpus.items():
            self._judges.setdefault(uuid, Judge(self.tolerance_ns))
            if source is None or not read:
                continue
            load = self._unmanaged.poll(
                uuid, set(gpu.managed), _held(gpu.holds), snapshot.offset, snapshot.now
            )
            report.loads[uuid] = load
            gap = self._unmanaged.probe_gap(uuid, snapshot.now)
            if gap:
                report.probes[uuid] = gap
            self._running[uuid] = self._read(source, uuid)
        running = {u: self._running[u] for u in snapshot.gpus if u in self._running}
        on_gpus = {u: pids | self._named_pids(u) for u, pids in running.items()}
        owners: dict[int, tuple[str, int]] = {}
        if any(on_gpus.values()) or any(j.flagged() for j in self._judges.values()):
            # (nothing on the GPUs and nobody flagged: nothing to place; 16 idle containers'
            # peers cost /proc reads at every read otherwise)
            owners = self._attributor.attribute(
                [c for gpu in snapshot.gpus.values() for c in gpu.containers],
                on_gpus,
                snapshot.peers,
            )
        quiet = read and self._quiet(snapshot)
        for uuid, gpu in snapshot.gpus.items():
            judge = self._judges[uuid]
            judge.retain(gpu.containers)
            self._mark_unplaced(uuid, gpu, running.get(uuid, set()), owners)
            for name, ns in self._judge(uuid, judge, gpu, snapshot, owners).items():
                report.charges.append((uuid, name, ns))
            gap = self._confirm_gap(uuid, judge, snapshot.now)
            if gap:
                report.probes[uuid] = max(gap, report.probes.get(uuid, 0))
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
        if read:
            self.idle = quiet
            self._last_read_ns = snapshot.now
        return report

    def _quiet(self, snapshot: Snapshot) -> bool:
        """Whether nobody held a token since the last read and every period read since shows
        the GPU idle: nothing to judge until something runs (out of turn too: the device's busy
        samples show it, and NVML keeps the samples for 10 s)."""
        since = self._last_read_ns
        if since is None:
            return False
        if any(h.end >= since for gpu in snapshot.gpus.values() for h in gpu.holds):
            return False
        return all(p.cursor_us is not None and not p.ran for p in self._periods.values())

    def _mark_unplaced(
        self,
        uuid: str,
        gpu: GpuSnapshot,
        running: set[int],
        owners: Mapping[int, tuple[str, int]],
    ) -> None:
        """Note that the periods up to the one in progress may hold work of processes placed in
        none of the GPU's containers (busy time past the holds then proves nothing)."""
        periods = self._periods.get(uuid)
        if periods is None or periods.cursor_us is None:
            return
        mine = set(gpu.containers)
        if any(pid not in owners or owners[pid][0] not in mine for pid in running):
            periods.unplaced_us = periods.cursor_us + 2 * periods.period_us

    def _confirm_gap(self, uuid: str, judge: Judge, now: int) -> int:
        """A probe's gap (ns) that would settle a suspect (outofturn.py, Confirmation), or 0:
        nobody suspect, someone flagged already, a process outside the containers on the GPU,
        or one asked for within CONFIRM_EVERY_NS (CONFIRM_AGAIN_NS for a suspect past
        CONFIRMED_AT)."""
        periods = self._periods.get(uuid)
        if periods is None or periods.cursor_us is None or not judge.suspects():
            return 0
        if judge.flagged() or periods.unplaced_us > periods.cursor_us:
            return 0
        every = CONFIRM_AGAIN_NS if judge.top_suspect() >= CONFIRMED_AT else CONFIRM_EVERY_NS
        if periods.probed_at and now - periods.probed_at < every:
            return 0
        periods.probed_at = now
        return round(CONFIRM_GAP * periods.period_us * US)

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
        """Judge the pending periods the hold log now covers; the charges, summed. A period
        after a hold that may still grow (`_growing`) waits, for that container, until the hold's
        end is known (the others are judged; the confirmation waits for all)."""
        periods = self._periods.get(uuid)
        charges: dict[str, int] = {}
        if periods is None:
            return charges
        keep: list[_Raw] = []
        growing = _growing(gpu.holds, snapshot.now)
        blocked: set[str] = set()  # containers a period before waits for: judged in order
        for raw in periods.pending:
            start = raw.start_us * US + snapshot.offset
            end = raw.end_us * US + snapshot.offset
            if start - self.tolerance_ns < snapshot.holds_from:
                continue  # older than the hold log: cannot be judged
            if end + self.tolerance_ns > snapshot.now:
                keep.append(raw)  # its holds are not all known yet
                continue
            named: dict[str, float] = {}
            placed = raw.start_us >= periods.unplaced_us
            for pid, percent in raw.named.items():
                owner = owners.get(pid)
                if owner is not None:
                    named[owner[0]] = named.get(owner[0], 0.0) + percent / 100
                placed = placed and owner is not None and owner[0] in gpu.containers
            period = Period(start, end, raw.busy / 100, named, placed)
            todo = [
                c
                for c in gpu.containers
                if c not in raw.done and c not in blocked and not end > growing.get(c, end)
            ]
            settled = set(gpu.containers) <= raw.done | set(todo)
            if not settled:  # a late DONE may still move the end of a hold of the others'
                keep.append(raw)
                blocked |= set(gpu.containers) - raw.done - set(todo)
                if not todo:
                    continue
            raw.done |= set(todo)
            if log.isEnabledFor(logging.DEBUG):
                held = {
                    Path(n).name: round(held_share(gpu.holds, n, start, end), 3)
                    for n in gpu.containers
                }
                who = {Path(n).name: x for n, x in named.items()}
                log.debug("period %d-%d busy %d named %s held %s", start, end, raw.busy, who, held)
            for name, ns in judge.add(period, gpu.holds, todo, confirm=settled).items():
                charges[name] = charges.get(name, 0) + ns
        periods.pending = keep
        return charges


def _growing(holds: tuple[Hold, ...], now: int) -> dict[str, int]:
    """{container: the end of its latest hold that may still grow}: one whose drain after the
    REVOKE took LATE_DRAIN_NS or more may have been forced to end at the revoke's deadline, and
    then a DONE that comes later moves its end there (the late drain is the holder's hand-over,
    charged by the schedule), up to DRAIN_CAP_NS after it."""
    out: dict[str, int] = {}
    for hold in holds:
        if hold.revoke is None or hold.end - hold.revoke < LATE_DRAIN_NS:
            continue
        if now < hold.end + DRAIN_CAP_NS:
            out[hold.container] = max(out.get(hold.container, 0), hold.end)
    return out


def _held(holds: tuple[Hold, ...]) -> HeldNs:
    """held(start, end): how long some container held the token within [start, end]."""

    def held(start: int, end: int) -> int:
        return sum(max(0, min(end, h.end) - max(start, h.start)) for h in holds)

    return held


def _wall_s(snapshot: Snapshot) -> float:
    """The snapshot's time in CLOCK_REALTIME seconds."""
    return (snapshot.now - snapshot.offset) / 1e9
