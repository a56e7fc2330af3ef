"""The out-of-turn judge (cgpu/compute/outofturn.py), on periods sampled as a real H100/H200
reports them: one process named per period when several ran, with the device's busy percent,
whole percent; the named one drawn with the chance of its share of the busy time."""

from __future__ import annotations

import random

from cgpu.compute.outofturn import (
    CONFIRMED_AT,
    FLAG_AT,
    SUSPECT_AT,
    Judge,
    Period,
    held_share,
    step,
)
from cgpu.compute.turnstate import Hold

MS = 1_000_000
P = 166 * MS  # NVML's period on an H100


def rotation(names: list[str], weights: list[float], start: int, end: int, quantum: int):
    """Holds of `names` taking turns of `quantum` * weight, round and round."""
    holds, t = [], start
    while t < end:
        for name, w in zip(names, weights, strict=True):
            length = int(quantum * w)
            holds.append(Hold(name, t, t + length - MS, t + length))
            t += length
    return holds


def sample(rng: random.Random, busy: dict[str, float]) -> tuple[float, dict[str, float]]:
    """One period's NVML view: (device busy, {who: named fraction}) for busy shares of the
    period (each in [0, 1], summing to at most 1)."""
    total = sum(busy.values())
    device = round(min(total, 1.0) * 100) / 100
    ran = [name for name, b in busy.items() if b > 0]
    if not ran:
        return device, {}
    if len(ran) == 1:
        return device, {ran[0]: round(busy[ran[0]] * 100) / 100}
    pick = rng.random() * total
    for name in ran:
        pick -= busy[name]
        if pick < 0:
            return device, {name: device}
    return device, {ran[-1]: device}


def run(judge, holds, periods, busy_of, containers, rng):
    """Feed `periods` periods; busy_of(k, held) -> {who: busy share}. Returns (charges per
    container, first period flagged per container)."""
    charged: dict[str, int] = {}
    first: dict[str, int] = {}
    i = 0
    for k in range(periods):
        start, end = k * P, (k + 1) * P
        while holds[i].end < start - P:
            i += 1
        near = [h for h in holds[i : i + 64] if h.start < end + P]
        held = {c: held_share(near, c, start, end) for c in containers}
        device, named = sample(rng, busy_of(k, held))
        for name, ns in judge.add(Period(start, end, device, named), near, containers).items():
            charged[name] = charged.get(name, 0) + ns
        for name in judge.flagged():
            first.setdefault(name, k)
    return charged, first


def test_held_share_merges_a_containers_holds_and_ignores_others():
    holds = [Hold("a", 0, None, 10), Hold("a", 5, None, 20), Hold("b", 20, None, 40)]
    assert held_share(holds, "a", 0, 40) == 0.5
    assert held_share(holds, "b", 30, 40) == 1.0
    assert held_share(holds, "c", 0, 40) == 0.0


def _cusum(periods: list[tuple[float, float]]) -> float:
    w = [0.0, 0.0, 0.0]
    for x, h in periods:
        w = step(w, x, h)
    return max(w)


def test_the_statistic_rises_only_past_what_the_holds_explain():
    assert _cusum([(0.5, 0.5)] * 600) == 0.0  # named exactly as much as it held
    assert _cusum([(1.0, 0.3)] * 14) >= FLAG_AT  # named in every period, 30% held
    assert _cusum([(1.0, 0.3)] * 10) < FLAG_AT
    assert _cusum([(0.0, 0.3)] * 59 + [(1.0, 0.3)]) < SUSPECT_AT  # one lucky period
    # A period it held none of and was named in weighs most; one it held half of, little.
    assert _cusum([(1.0, 0.0)]) > 3 * _cusum([(1.0, 0.5)]) > 0


def _used_95(k: int, held: dict[str, float]) -> dict[str, float]:
    return {name: 0.95 * h for name, h in held.items()}


def test_containers_that_follow_the_protocol_are_never_flagged_nor_charged():
    # Near the worst case for the statistic: two containers taking turns half and half, and
    # 30/70, using 95% of their holds; 20 minutes of periods each (7200), two seeds.
    for seed in range(2):
        rng = random.Random(seed)
        for weights in ([0.5, 0.5], [0.3, 0.7]):
            names = ["a", "b"]
            holds = rotation(names, weights, 0, 1201 * 1000 * MS, 40 * MS)
            judge = Judge()
            charged, first = run(judge, holds, 7200, _used_95, names, rng)
            assert not first and not charged, (seed, weights, first, charged)


def test_a_follower_beside_an_unmanaged_saturating_process_is_never_flagged():
    # The unmanaged process runs through every turn: the GPU time-slices, the follower gets
    # half of its holds, and the unmanaged process is named in most periods.
    rng = random.Random(7)
    holds = rotation(["a", "b"], [0.3, 0.7], 0, 1201 * 1000 * MS, 60 * MS)
    judge = Judge()

    def busy(k, held):
        return {"a": held["a"] / 2, "b": held["b"] / 2, "u": 0.5}

    charged, first = run(judge, holds, 7200, busy, ["a", "b"], rng)
    assert not first and not charged


def test_an_out_of_turn_container_is_flagged_by_the_statistic_alone_and_charged():
    # fixed 30 holds 30% of the turns and runs out of turn too: 84% of the device; no probe
    # (no free time) to confirm it: the statistic alone, within 4 s.
    rng = random.Random(3)
    holds = rotation(["off", "n"], [0.3, 0.7], 0, 60 * 1000 * MS, 66 * MS)
    judge = Judge(tolerance_ns=10 * MS)

    def busy(k, held):
        return {"off": 0.84, "n": 0.16}

    charged, first = run(judge, holds, 120, busy, ["off", "n"], rng)
    assert "n" not in first and "n" not in charged
    assert first["off"] * P <= 4000 * MS, first
    # 20 s of 0.84 - 0.3: about 10.8 s out of turn; charged from the flag on, less the
    # tolerance's share.
    assert 8e9 < charged["off"] < 11.5e9, charged
    verdict = judge.verdict("off", 120 * P)
    assert verdict.flagged and 70 < verdict.host_percent < 95


def test_out_of_turn_work_in_periods_it_never_held_is_flagged_at_once():
    holds = [Hold("n", 0, None, 100 * P)]
    judge = Judge(tolerance_ns=10 * MS)
    for k in range(4):
        judge.add(Period(k * P, (k + 1) * P, 1.0, {"off": 1.0}), holds, ["off", "n"])
    assert judge.flagged() == {"off"}  # in 4 periods (0.67 s)
    judge.clear("off")
    assert judge.flagged() == set()
    assert judge.verdict("off", 3 * P).host_percent == 0.0


def _probed(k: int, gap: float) -> list[Hold]:
    """Holds of n and off 65/35 in period k, except its first `gap` share: nobody held it."""
    start, end = k * P + int(gap * P), (k + 1) * P
    cut = start + int(0.65 * (end - start))
    return [Hold("n", start, None, cut), Hold("off", cut, None, end)]


def _suspect(judge: Judge) -> None:
    """Periods that make `off` a suspect: named in 4 of 4 it held 35% of (W about 3.6)."""
    for k in range(4):
        holds = _probed(k, 0.0)
        judge.add(Period(k * P, (k + 1) * P, 1.0, {"off": 1.0}, placed=True), holds, ["off", "n"])
    assert judge.suspects() == {"off"} and not judge.flagged()


def test_busy_time_in_a_probe_that_no_hold_explains_confirms_a_suspect():
    judge = Judge(tolerance_ns=10 * MS)
    _suspect(judge)
    # The probe: nobody held 40% of period 4, and the device was busy throughout. `off` is
    # named (as the process running alone in the gap would be, most of the time).
    judge.add(Period(4 * P, 5 * P, 1.0, {"off": 1.0}, placed=True), _probed(4, 0.4), ["off", "n"])
    assert judge.flagged() == {"off"}


def test_a_probe_confirms_nothing_when_the_gpu_idled_or_a_process_was_not_placed():
    # The gap idled (followers only): busy is the held share, within the boundary slack.
    judge = Judge(tolerance_ns=10 * MS)
    _suspect(judge)
    judge.add(Period(4 * P, 5 * P, 0.66, {"n": 0.66}, placed=True), _probed(4, 0.4), ["off", "n"])
    assert judge.confirmed_at is None and not judge.flagged()
    # Busy through the gap, but a process outside the containers is on the GPU: it explains it.
    judge = Judge(tolerance_ns=10 * MS)
    _suspect(judge)
    judge.add(Period(4 * P, 5 * P, 1.0, {"off": 1.0}, placed=False), _probed(4, 0.4), ["off", "n"])
    assert judge.confirmed_at is None and not judge.flagged()


def test_a_confirmation_flags_only_a_container_whose_own_statistic_says_so():
    # off runs out of turn; n follows and was named a little more than it held once. The
    # confirmed out-of-turn work lowers the bar to CONFIRMED_AT for each, not to a suspicion.
    judge = Judge(tolerance_ns=10 * MS)
    holds = _probed(0, 0.0)
    judge.add(Period(0, P, 1.0, {"n": 1.0}, placed=True), holds, ["off", "n"])
    judge.add(Period(P, 2 * P, 1.0, {"off": 1.0}, placed=True), _probed(1, 0.4), ["off", "n"])
    assert judge.confirmed_at == 2 * P
    assert not judge.flagged()  # off's W (about 2) is below CONFIRMED_AT, n's far below
    for k in range(2, 6):
        judge.add(
            Period(k * P, (k + 1) * P, 1.0, {"off": 1.0}, placed=True),
            _probed(k, 0.0),
            ["off", "n"],
        )
        if judge.flagged():
            break
    assert judge.flagged() == {"off"} and k <= 4
    assert CONFIRMED_AT < FLAG_AT


def test_a_probe_split_between_two_periods_still_confirms():
    # The gap: the last 13% of period 4 and the first 12% of period 5; neither alone has the
    # free time to show anything past the boundary slack, the two together do.
    judge = Judge(tolerance_ns=10 * MS)
    _suspect(judge)
    first = [
        Hold("n", 4 * P, None, 4 * P + int(0.6 * P)),
        Hold("off", 4 * P + int(0.6 * P), None, 4 * P + int(0.87 * P)),
    ]
    judge.add(Period(4 * P, 5 * P, 1.0, {"n": 1.0}, placed=True), first, ["off", "n"])
    assert judge.confirmed_at is None
    second = [Hold("n", 5 * P + int(0.12 * P), None, 6 * P)]
    judge.add(Period(5 * P, 6 * P, 1.0, {"n": 1.0}, placed=True), first + second, ["off", "n"])
    assert judge.confirmed_at == 6 * P
