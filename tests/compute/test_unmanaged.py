"""The unmanaged-load estimator: demand from busy samples less the holds, and NVML's side."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable

import pytest

from cgpu.compute.unmanaged import DemandEstimate, UnmanagedLoad

MS = 1_000_000
PERIOD = 100 * MS


def _never_held(start: int, end: int) -> int:
    return 0


def _feed(estimate: DemandEstimate, seconds: float, busy: float, held_share: float) -> None:
    """Periods of 100 ms in which the GPU was `busy` and a container held it `held_share`."""
    ends = [i * PERIOD for i in range(1, round(seconds * 10) + 1)]

    def held(start: int, end: int) -> int:
        return round((end - start) * held_share)

    estimate.add([(end, busy) for end in ends], held)


@pytest.mark.parametrize(
    "busy, held_share, demand",
    [
        (1.0, 0.0, 1.0),  # busy and never held: all of it is someone else's
        (0.0, 0.0, 0.0),
        (0.5, 0.5, 0.0),  # all the busy time is the holder's
        (0.75, 0.5, 0.5),  # a quarter of the period beside a half that was free
        (1.0, 0.85, 1.0),  # busy through the free time too
        (1.0, 0.95, 0.0),  # held nearly all the period: skipped, the estimate stays
        (1.0, 1.0, 0.0),
    ],
)
def test_demand_is_the_busy_time_no_hold_explains(busy, held_share, demand) -> None:
    estimate = DemandEstimate()
    _feed(estimate, 5, busy, held_share)
    assert estimate.u == pytest.approx(demand, abs=0.01)


def test_turns_longer_than_a_period_do_not_hide_a_saturating_neighbour() -> None:
    # A neighbour that saturates the GPU, then a container holding it for whole periods (the
    # GPU busy throughout): those periods say nothing of the neighbour, so its demand stays
    # (counting them as none made the holder pay for the whole GPU it shared).
    estimate = DemandEstimate()
    _feed(estimate, 3, 1.0, 0.0)
    before = estimate.u
    ends = [3 * 10**9 + i * PERIOD for i in range(1, 6)]
    estimate.add([(end, 1.0) for end in ends], lambda start, end: end - start)
    assert estimate.u == pytest.approx(before)


def test_how_busy_a_hold_keeps_the_gpu_is_learnt_from_whole_held_periods() -> None:
    # Beside a saturating neighbour a hold keeps the GPU 97.6% busy (the two contexts
    # time-slice, each switch idles it). Learnt from periods held whole, it is not mistaken
    # for the neighbour's demand in periods held in part (60%: 0.6 * 0.976 + 0.4 busy).
    estimate = DemandEstimate()
    ends = [i * PERIOD for i in range(1, 31)]
    estimate.add([(end, 0.976) for end in ends], lambda start, end: end - start)
    assert estimate.held_busy == pytest.approx(0.976, abs=0.01)
    more = [3 * 10**9 + i * PERIOD for i in range(1, 61)]
    estimate.add(
        [(end, 0.6 * 0.976 + 0.4) for end in more], lambda start, end: (end - start) * 6 // 10
    )
    assert estimate.u == pytest.approx(1.0, abs=0.01)  # (taken as b = 1: 0.96)


def test_demand_is_smoothed_over_about_a_third_of_a_second_of_free_time() -> None:
    estimate = DemandEstimate()
    _feed(estimate, 1, 0.0, 0.0)  # an idle GPU (the first period that teaches u sets it alone)
    assert estimate.u == 0.0
    busy = [10**9 + PERIOD]
    estimate.add([(end, 1.0) for end in busy], _never_held)  # 100 ms free and busy
    assert 0.2 < estimate.u < 0.6
    before = estimate.u
    estimate.add([(end, 1.0) for end in busy], _never_held)  # the same period again: old news
    assert estimate.u == before
    half = [busy[-1] + PERIOD]
    estimate.add([(end, 1.0) for end in half], lambda start, end: (end - start) // 2)
    assert estimate.u - before < (1 - before) * 0.2  # 50 ms free: it counts for half as much
    more = [half[-1] + i * PERIOD for i in range(1, 11)]
    estimate.add([(end, 1.0) for end in more], _never_held)
    assert estimate.u > 0.95


def test_the_first_period_after_a_guess_replaces_it() -> None:
    estimate = DemandEstimate()
    _feed(estimate, 1, 1.0, 0.0)
    estimate.u, estimate.learn_from = 1.0, estimate.last_end  # a neighbour came: the guess
    seen = estimate.last_end
    estimate.add([(seen + PERIOD, 0.0)], _never_held)  # the period it was seen in: skipped
    assert estimate.u == 1.0
    estimate.add([(seen + 2 * PERIOD, 0.0)], _never_held)
    assert estimate.u == 0.0  # it idles: the holders are not charged for it for a second


class FakeSource:
    """Pids on the GPU and one busy sample per poll; `fail` makes every call raise."""

    def __init__(self, pids: set[int]) -> None:
        self.pids = pids
        self.now_us = 1_000_000_000
        self.fail = False
        self.busy = 100

    def running_pids(self, uuid: str) -> set[int]:
        if self.fail:
            raise RuntimeError("GPU is lost")
        return self.pids

    def busy_samples(self, uuid: str, after_us: int) -> list[tuple[int, int]]:
        self.now_us += 100_000
        ends = range(self.now_us - 1_000_000, self.now_us + 1, 100_000)
        return [(end, self.busy) for end in ends if end > after_us]


def _poll(load: UnmanagedLoad, managed: set[int], times: int, held: Callable = _never_held):
    return [load.poll("GPU-a", managed, held, offset_ns=0) for _ in range(times)][-1]


def test_the_load_is_demand_times_the_processes_outside_the_containers() -> None:
    load = UnmanagedLoad(FakeSource({10, 11, 12}))
    # Neighbours that appear are taken to saturate the GPU until their samples say otherwise.
    assert _poll(load, {10}, 1) == 2.0
    assert _poll(load, {10}, 40) == pytest.approx(2.0, abs=0.05)
    assert _poll(load, {10, 11, 12}, 1) == 0.0


def test_a_new_neighbour_that_idles_stops_counting_within_a_second_or_so() -> None:
    source = FakeSource({10, 11})
    source.busy = 0
    load = UnmanagedLoad(source)
    assert _poll(load, {10}, 1) == 1.0  # assumed busy at first
    assert _poll(load, {10}, 15) < 0.25  # 1.5 s of idle samples


def test_nvml_failures_give_no_load_and_one_log_line(caplog) -> None:
    source = FakeSource({11})
    load = UnmanagedLoad(source)
    _poll(load, set(), 20)
    source.fail = True
    with caplog.at_level(logging.WARNING):
        assert _poll(load, set(), 3) == 0.0
    assert len(caplog.records) == 1 and "GPU is lost" in caplog.text
    assert UnmanagedLoad(None).poll("GPU-a", set(), _never_held, 0) == 0.0


NVML_PROBE = """
import json, pynvml
from cgpu.compute.unmanaged import NvmlSource
source = NvmlSource.open()
uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
samples = source.busy_samples(uuid, 0)
newer = source.busy_samples(uuid, samples[-1][0])
print(json.dumps([samples, newer, sorted(source.running_pids(uuid))]))
source.close()
"""


def test_nvml_source_reads_the_simulators_samples(sim_env) -> None:
    env = sim_env(devices=1)
    done = subprocess.run(
        [sys.executable, "-c", NVML_PROBE], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    samples, newer, pids = json.loads(done.stdout)
    assert len(samples) > 1 and all(busy == 0 for _, busy in samples)  # an idle GPU
    ends = [end for end, _ in samples]
    assert ends == sorted(ends) and len(set(ends)) == len(ends)
    assert all(end > samples[-1][0] for end, _ in newer)
    assert pids == []


def test_the_period_a_neighbour_is_seen_in_does_not_count() -> None:
    # That period holds time before the neighbour ran (its start-up): it would pull the
    # assumed saturation down at once, and the holder would pay for more of the GPU than it had.
    source = FakeSource({10, 11})
    load = UnmanagedLoad(source)
    assert _poll(load, {10, 11}, 3) == 0.0  # no neighbour yet
    source.busy = 30
    assert _poll(load, {10}, 1) == 1.0  # seen: assumed to saturate, its first period skipped
    assert _poll(load, {10}, 1) < 1.0  # the next period counts


def test_a_probe_period_after_seconds_held_throughout_sets_the_demand_alone() -> None:
    # The neighbour idled while u was learnt (u = 0); then the limited containers held the token
    # through every period for 2 s, which teaches nothing; the probe's period (a quarter free,
    # the GPU busy throughout it) stands for that time and sets u at once.
    estimate = DemandEstimate()
    _feed(estimate, 2, 0.0, 0.0)
    assert estimate.u == pytest.approx(0.0)
    held_ends = [2 * 10**9 + i * PERIOD for i in range(1, 21)]
    estimate.add([(end, 1.0) for end in held_ends], lambda start, end: end - start)
    assert estimate.u == pytest.approx(0.0)
    assert estimate.probe_due(4 * 10**9, last_probe=0)
    probe_end = 4 * 10**9 + PERIOD
    estimate.add([(probe_end, 1.0)], lambda start, end: (end - start) * 3 // 4)
    assert estimate.u == pytest.approx(1.0, abs=0.01)
    assert not estimate.probe_due(probe_end + 500 * MS, last_probe=0)
    assert estimate.probe_due(probe_end + 1000 * MS, last_probe=0)


def test_no_probe_while_periods_teach_the_demand_or_nobody_else_runs() -> None:
    source = FakeSource({10, 11})
    load = UnmanagedLoad(source)
    clock = 0
    gaps = []
    for _ in range(50):  # 5 s of polls; the FakeSource's periods are never held: they teach u
        clock += 100 * MS
        load.poll("GPU-a", {10}, _never_held, offset_ns=0, now_ns=clock)
        gaps.append(load.probe_gap("GPU-a", clock))
    assert not any(gaps)
    alone = UnmanagedLoad(FakeSource({10}))  # every process on the GPU is a container's
    for i in range(50):
        alone.poll("GPU-a", {10}, lambda start, end: end - start, 0, now_ns=i * 100 * MS)
        assert alone.probe_gap("GPU-a", i * 100 * MS) == 0


def test_a_gpu_held_throughout_beside_a_neighbour_is_probed_every_second() -> None:
    source = FakeSource({10, 11})
    load = UnmanagedLoad(source)
    offset = -source.now_us * 1000  # the samples' clock: the poll's clock
    asked = []
    for i in range(1, 61):  # 6 s of polls, every period held whole
        clock = i * 100 * MS
        load.poll("GPU-a", {10}, lambda start, end: end - start, offset, now_ns=clock)
        gap = load.probe_gap("GPU-a", clock)
        if gap:
            asked.append((clock, gap))
    # two periods after the neighbour is first seen (a newcomer), then every second
    assert [t for t, _ in asked] == [300 * MS, *(i * 1000 * MS + 1300 * MS for i in range(5))]
    assert all(gap == 25 * MS for _, gap in asked)  # a quarter of the 100 ms period
