"""The arbiter's NVML thread (sampler.py) and the levers (levers.py)."""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from arbiter_kit import UUID, Client, make_container

from cgpu.compute.arbiter import Arbiter, ArbiterConfig
from cgpu.compute.levers import Levers
from cgpu.compute.outofturn import TOLERANCE_NS, Period, free_time, out_of_turn_shown
from cgpu.compute.sampler import (
    CONFIRM_GAP,
    IDLE_READ_S,
    MAX_WAIT_S,
    GpuSnapshot,
    Sampler,
    Snapshot,
)
from cgpu.compute.turnstate import Hold

MS = 1_000_000
PERIOD_US = 166_667


class HangingSource:
    """An NVML whose calls never return once `hang` is set (a GPU fallen off the bus)."""

    def __init__(self) -> None:
        self.hang = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def _maybe_hang(self) -> None:
        self.calls += 1
        if self.hang.is_set():
            self.release.wait()

    def running_pids(self, uuid: str) -> set[int]:
        self._maybe_hang()
        return {999_999}

    def busy_samples(self, uuid: str, after_us: int) -> list[tuple[int, int]]:
        self._maybe_hang()
        return []


class ScriptedSource:
    """NVML periods on a fixed grid, each naming `named(k)` -> {pid: percent}."""

    def __init__(self, named) -> None:
        self.named = named
        self.now_us = 0

    def running_pids(self, uuid: str) -> set[int]:
        return {1, 2}

    def _ends(self, after_us: int) -> list[int]:
        last = self.now_us // PERIOD_US
        return [k * PERIOD_US for k in range(1, last + 1) if k * PERIOD_US > after_us]

    def busy_samples(self, uuid: str, after_us: int) -> list[tuple[int, int]]:
        return [(end, 100) for end in self._ends(after_us)]

    def process_samples(self, uuid: str, after_us: int) -> list[tuple[int, int, int]]:
        found: dict[int, tuple[int, int, int]] = {}
        for end in self._ends(after_us):
            for pid, percent in self.named(end // PERIOD_US).items():
                found[pid] = (pid, end, percent)  # one period read at a time: no mean needed
        return list(found.values())


class FixedAttributor:
    def __init__(self, owners: dict[int, tuple[str, int]]) -> None:
        self.owners = owners

    def attribute(self, containers, running, peers):
        return dict(self.owners)


def test_the_arbiter_hands_out_turns_while_nvml_hangs(tmp_path):
    # Two containers take turns on a GPU whose NVML hangs: the arbiter's thread never waits
    # for it, so turns keep changing hands and both get their grants (a 5 ms quantum: about
    # 100 turns each in the second).

    root = tmp_path / "containers"
    a_dir = make_container(root, "a", {UUID: (50, "share")})
    b_dir = make_container(root, "b", {UUID: (50, "share")})
    source = HangingSource()
    arbiter = Arbiter(ArbiterConfig(roots=(root,), quantum_ns=5 * MS), busy_source=source)
    runner = threading.Thread(target=arbiter.run, daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 5
        while not (a_dir / "compute.sock").exists() or not (b_dir / "compute.sock").exists():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.3)  # the NVML thread has polled
        assert source.calls > 0
        source.hang.set()
        time.sleep(0.3)  # and is stuck now
        stop = threading.Event()
        clients = [Client(d).hello((0, UUID)) for d in (a_dir, b_dir)]
        with ThreadPoolExecutor(2) as pool:
            counts = [pool.submit(c.saturate, 0, stop) for c in clients]
            time.sleep(1.0)
            stop.set()
            grants = {"a": counts[0].result(), "b": counts[1].result()}
        assert grants["a"] >= 20 and grants["b"] >= 20, grants
        assert abs(grants["a"] - grants["b"]) <= max(grants.values()) / 3, grants
        assert runner.is_alive()
    finally:
        arbiter.stop()
        runner.join(5)
        source.release.set()
    assert not runner.is_alive()


def test_out_of_turn_work_is_judged_charged_and_reported_from_the_nvml_thread():
    # "off" holds nothing and its pid is named in every period; "n" holds throughout.
    source = ScriptedSource(lambda k: {1: 100})
    owners = {1: ("off", 11), 2: ("n", 22)}
    sampler = Sampler(source, FixedAttributor(owners), tolerance_ns=0)
    offset = 0
    reports = []
    for step in range(1, 40):
        source.now_us = step * 100_000
        now = source.now_us * 1000
        holds = (Hold("n", 0, None, now),)
        gpu = GpuSnapshot(holds, frozenset({2}), ("off", "n"))
        snap = Snapshot(now, offset, 0, {UUID: gpu}, {2: "n"})
        reports.append(sampler.cycle(snap))
    charged = sum(ns for r in reports for _, name, ns in r.charges if name == "off")
    assert not any(name == "n" for r in reports for _, name, _ in r.charges)
    assert 2.5e9 < charged < 4e9, charged  # 3.7 s of periods, all of it out of turn
    last = reports[-1]
    assert last.host[UUID].available
    assert last.host[UUID].containers["off"].flagged
    assert last.host[UUID].containers["off"].host_percent == 100.0
    assert not last.host[UUID].containers["n"].flagged
    assert last.targets == {"off": ((1, 11),)}


def test_a_source_without_process_samples_has_no_host_view():
    sampler = Sampler(HangingSource(), FixedAttributor({}))
    gpu = GpuSnapshot((), frozenset(), ("a",))
    report = sampler.cycle(Snapshot(10**9, 0, 0, {UUID: gpu}, {}))
    assert report.host[UUID].available is False


def test_levers_stop_a_flagged_container_outside_its_turns_and_only_it():
    sent: list[tuple[int, int]] = []
    levers = Levers(send=lambda pid, started, sig: sent.append((pid, sig)) or True)
    assert levers.set_targets({"off": [(10, 1), (11, 1)]}) == []
    assert levers.follow({"n"}) == ["off"]
    assert sent == [(10, signal.SIGSTOP), (11, signal.SIGSTOP)]
    sent.clear()
    assert levers.follow({"n"}) == []  # already stopped
    assert sent == []
    levers.follow({"off"})  # its turn: continued
    assert sent == [(10, signal.SIGCONT), (11, signal.SIGCONT)]
    sent.clear()
    levers.follow(set())
    levers.release()
    stop, cont = signal.SIGSTOP, signal.SIGCONT
    assert sent == [(10, stop), (11, stop), (10, cont), (11, cont)]


def test_enforce_kills_the_flagged_containers_processes_once():
    sent: list[tuple[int, int]] = []
    levers = Levers(enforce=True, send=lambda pid, started, sig: sent.append((pid, sig)) or True)
    assert levers.set_targets({"off": [(10, 1)]}) == [10]
    assert levers.set_targets({"off": [(10, 1), (12, 1)]}) == [12]
    assert levers.follow(set()) == []
    assert sent == [(10, signal.SIGKILL), (12, signal.SIGKILL)]
    assert levers.kills == 2


class QuietSource(ScriptedSource):
    """ScriptedSource whose device is idle until `busy` is set."""

    def __init__(self, named) -> None:
        super().__init__(named)
        self.busy = 0

    def busy_samples(self, uuid: str, after_us: int) -> list[tuple[int, int]]:
        return [(end, self.busy) for end in self._ends(after_us)]


def test_the_nvml_thread_reads_once_a_second_while_nothing_runs_and_every_period_after():
    source = QuietSource(lambda k: {})
    sampler = Sampler(source, FixedAttributor({}), tolerance_ns=0)
    gpu = GpuSnapshot((), frozenset(), ("a",))
    for step in range(1, 6):
        source.now_us = step * 100_000
        sampler.cycle(Snapshot(source.now_us * 1000, 0, 0, {UUID: gpu}, {}))
    assert sampler.idle and sampler._wait_s() == IDLE_READ_S
    # Work appears (a container granted, or a process out of turn): every period again.
    source.busy, source.now_us = 100, 700_000
    sampler.cycle(Snapshot(source.now_us * 1000, 0, 0, {UUID: gpu}, {}))
    assert not sampler.idle and sampler._wait_s() <= MAX_WAIT_S
    # A hold alone, with the device still idle, is work too.
    source.busy = 0
    for step in (8, 9, 10):
        source.now_us = step * 100_000
        now = source.now_us * 1000
        held = GpuSnapshot((Hold("a", now - 50 * MS, None, now),), frozenset(), ("a",))
        sampler.cycle(Snapshot(now, 0, 0, {UUID: held}, {}))
        assert not sampler.idle


def _rotation(now: int) -> tuple[Hold, ...]:
    """off 30%, n 70%, turns of 20 ms, up to `now`."""
    holds, t = [], 0
    while t < now:
        holds += [Hold("off", t, None, t + 6 * MS), Hold("n", t + 6 * MS, None, t + 20 * MS)]
        t += 20 * MS
    return tuple(holds)


def _probes_asked(owners: dict[int, tuple[str, int]]) -> list[int]:
    # off holds 30% of the turns and is named in every period: a suspect within a second.
    source = ScriptedSource(lambda k: {1: 100})
    sampler = Sampler(source, FixedAttributor(owners), tolerance_ns=0)
    asked = []
    for step in range(1, 25):
        source.now_us = step * 100_000
        now = source.now_us * 1000
        gpu = GpuSnapshot(_rotation(now), frozenset({1, 2}), ("off", "n"))
        report = sampler.cycle(Snapshot(now, 0, 0, {UUID: gpu}, {1: "off", 2: "n"}))
        asked += [gap for uuid, gap in report.probes.items() if uuid == UUID]
    return asked


def test_a_suspect_gets_a_probe_only_while_every_process_on_the_gpu_is_placed():
    asked = _probes_asked({1: ("off", 11), 2: ("n", 22)})
    # probes of CONFIRM_GAP of a period; W is soon past CONFIRMED_AT, where a confirmation
    # would flag it: one a second in these 2.4 s, not one per 2 s (a probe that showed
    # nothing, the offender paused by chance, cost 2 s more: flagged 4-6 s in, the goal 3 s)
    assert asked == [round(CONFIRM_GAP * PERIOD_US * 1000)] * 2
    # pid 2 placed in no container of the GPU: busy time could be its; no probe
    assert _probes_asked({1: ("off", 11)}) == []


def test_a_probes_gap_shows_out_of_turn_work_though_the_device_reads_95_percent():
    """A probe's gap, in one period, beside holds over the rest of it: work that ran through the
    gap confirms, though a saturated device's busy reads a little under 100% (a fifth of a period
    left 4 ms past the slack and margin at 100%, none at 95%: on the simulator the first probe
    confirmed nothing in one run of three, flagged at 3.5 s)."""
    length = PERIOD_US * 1000
    gap = round(CONFIRM_GAP * length)
    start = 10 * length
    holds = [
        Hold("n", start - length, None, start + 1 * MS),
        Hold("s", start + 1 * MS + gap, None, start + 2 * length),
    ]
    period = Period(start, start + length, 0.95, {"off": 0.95}, placed=True)
    free = free_time(period, holds)
    assert free is not None and out_of_turn_shown(free, None, 2 * TOLERANCE_NS)
