"""The out-of-turn judge (cgpu/compute/outofturn.py), on periods sampled as a real H100/H200
reports them: one process named per period when several ran, with the device's busy percent,
whole percent; the named one drawn with the chance of its share of the busy time."""

from __future__ import annotations

import random

from cgpu.compute.outofturn import Judge, Period, held_share, trips
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


def test_a_window_trips_only_past_what_the_holds_explain():
    followed = [(0, P, 0.5, 0.5)] * 60
    assert not trips(followed)
    over = [(0, P, 1.0, 0.3)] * 12
    assert trips(over)
    one_lucky_period = [(0, P, 0.0, 0.3)] * 59 + [(0, P, 1.0, 0.3)]
    assert not trips(one_lucky_period)


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


def test_an_out_of_turn_container_is_flagged_within_3_s_and_charged_what_it_took():
    # fixed 30 holds 30% of the turns and runs out of turn too: 84% of the device.
    rng = random.Random(3)
    holds = rotation(["off", "n"], [0.3, 0.7], 0, 60 * 1000 * MS, 66 * MS)
    judge = Judge(tolerance_ns=10 * MS)

    def busy(k, held):
        return {"off": 0.84, "n": 0.16}

    charged, first = run(judge, holds, 120, busy, ["off", "n"], rng)
    assert "n" not in first and "n" not in charged
    assert first["off"] * P <= 3000 * MS, first
    # 20 s of 0.84 - 0.3: about 10.8 s out of turn; charged from the flag on, less the
    # tolerance's share.
    assert 8e9 < charged["off"] < 11.5e9, charged
    verdict = judge.verdict("off", 120 * P)
    assert verdict.flagged and 70 < verdict.host_percent < 95


def test_out_of_turn_work_in_periods_it_never_held_is_flagged_at_once():
    holds = [Hold("n", 0, None, 100 * P)]
    judge = Judge(tolerance_ns=10 * MS)
    for k in range(3):
        judge.add(Period(k * P, (k + 1) * P, 1.0, {"off": 1.0}), holds, ["off", "n"])
    assert judge.flagged() == {"off"}
    judge.clear("off")
    assert judge.flagged() == set()
    assert judge.verdict("off", 3 * P).host_percent == 0.0
