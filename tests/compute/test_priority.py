"""Compute priorities (`high`, `normal`, `low`) in the per-GPU scheduler, in simulated time.

What a user relies on: a `high` container gets the GPU within a quantum of asking (the holder is
revoked at once), never more than its `fixed` limit, and `low` work waits while `high` work
runs; a stopped `high` process blocks nobody; `normal` is the scheduler without priorities.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from test_schedule import MS, SECOND, DeadlineSim, Sim, revoke_time  # tests/compute on sys.path

from cgpu.compute import status
from cgpu.compute.discovery import Discovery, check_limit
from cgpu.compute.schedule import PREEMPTIBLE_WORK_DIVISOR, GpuSchedule
from cgpu.core.config import write_config


def add(sim: Sim, name: str, percent: int, policy: str, priority: str, conns: int = 1) -> list[str]:
    """A container of saturating connections with a priority."""
    made = sim.add(name, percent, policy, conns)
    sim.gpu.set_limit(name, percent, policy, priority)
    return made


class Requests:
    """An inference container: each request wants the GPU, runs `work_ms` once granted, then
    its connection goes idle (and is released as the shim's IDLE makes it)."""

    def __init__(self, sim: Sim, name: str, percent: int, policy: str, priority: str) -> None:
        self.sim = sim
        sim.gpu.set_limit(name, percent, policy, priority)
        self.conn = f"{name}/0"
        sim.gpu.connect(self.conn, name, sim.now)
        self.asked: list[int] = []  # arrival times not yet served
        self.latencies: list[int] = []  # arrival to the end of its work, ns
        self.running_until: int | None = None
        self.busy_ns = 0
        self.read = 0  # how much of sim.sent it has seen

    def arrive(self) -> None:
        self.asked.append(self.sim.now)
        if self.running_until is None and self.sim.gpu.holder != self.conn.split("/")[0]:
            self.sim.gpu.want(self.conn, self.sim.now)

    def tick(self, work_ms: int) -> None:
        """Called every simulated ms after the schedule has settled."""
        gpu, now = self.sim.gpu, self.sim.now
        for _, conn, order in self.sim.sent[self.read :]:
            if conn == self.conn and order.kind == "revoke":
                gpu.done(self.conn, order.epoch, now)  # its request's work drains at once
        self.read = len(self.sim.sent)
        self.sim.settle()
        holds = gpu.holder == self.conn.split("/")[0]
        if self.running_until is not None and now >= self.running_until:
            self.latencies.append(now - self.asked.pop(0))
            self.running_until = None
            if not self.asked:
                gpu.idle(self.conn, now)
        if self.running_until is None and self.asked and holds:
            gpu.busy(self.conn)
            self.running_until = now + work_ms * MS
        elif self.running_until is None and self.asked and not holds:
            gpu.want(self.conn, now)
        if self.running_until is not None:
            self.busy_ns += MS


def serve(sim: Sim, inference: Requests, seconds: float, rate: float, work_ms: int) -> None:
    """Poisson arrivals at `rate` per second for `seconds`, stepped every millisecond."""
    rng = random.Random(35)
    arrivals = set()
    t = 0.0
    while t < seconds:
        t += rng.expovariate(rate)
        arrivals.add(round(t * 1000))
    for ms in range(round(seconds * 1000)):
        if ms in arrivals:
            inference.arrive()
        sim.settle()
        inference.tick(work_ms)
        sim.settle()
        sim.held[sim.gpu.holder] += 1
        sim.now += MS


PREEMPTIBLE = 20 * MS // PREEMPTIBLE_WORK_DIVISOR  # what a grant beside a high one admits: 1 ms
LEAD = 3 * PREEMPTIBLE // 2  # the queued work at which a spent grant is renewed beside it


def p99(values: list[int]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] / MS


def test_a_high_waiter_revokes_a_low_holder_at_once() -> None:
    sim = Sim()
    (low,) = add(sim, "low", 90, "share", "low")
    sim.run(0.005)
    assert sim.gpu.holder == "low"
    inference = Requests(sim, "high", 10, "fixed", "high")
    inference.arrive()
    asked = sim.now
    sim.settle()
    assert revoke_time(sim, low) == asked  # not at the end of its turn
    assert sim.gpu.holder == "high"


def test_a_normal_waiter_waits_for_the_low_holders_quantum() -> None:
    sim = Sim()
    (low,) = add(sim, "low", 50, "share", "low")
    sim.run(0.005)
    add(sim, "normal", 50, "share", "normal")
    sim.run(0.030)
    assert revoke_time(sim, low) == 20 * MS  # the quantum rules, as without priorities


def test_the_old_two_argument_limit_is_normal() -> None:
    gpu: GpuSchedule[str] = GpuSchedule(20 * MS, SECOND, 2 * MS, now=0)
    gpu.set_limit("a", 30, "fixed")
    assert gpu.usage(0)["a"].priority == "normal"
    gpu.set_limit("a", 30, "fixed", "high")
    assert gpu.usage(0)["a"].priority == "high"


@pytest.mark.parametrize("priority", ["urgent", "", "HIGH", None])
def test_an_unknown_priority_is_refused(priority) -> None:
    with pytest.raises(ValueError, match="priority"):
        check_limit(30, "fixed", priority)


def test_low_is_never_granted_while_high_work_runs() -> None:
    sim = Sim()
    add(sim, "high", 50, "share", "high")
    add(sim, "low", 50, "share", "low")
    sim.run(3)
    assert sim.held["low"] == 0
    assert sim.held["high"] >= 2990


def test_a_hostile_high_container_gets_no_more_than_its_fixed_limit() -> None:
    sim = Sim()
    add(sim, "high", 30, "fixed", "high", conns=2)  # never idles
    add(sim, "low", 100, "share", "low")
    sim.run(10)
    assert sim.charged_s("high") == pytest.approx(3.0, abs=0.1)
    assert sim.charged_s("high") <= 3.05
    # low runs whenever high has no credit: the GPU is not left idle for it
    assert sim.charged_s("low") == pytest.approx(7.0, abs=0.15)


def test_a_normal_container_beside_high_and_low_keeps_its_place() -> None:
    sim = Sim()
    add(sim, "high", 20, "fixed", "high")
    add(sim, "normal", 40, "share", "normal")
    add(sim, "low", 40, "share", "low")
    sim.run(10)
    assert sim.charged_s("high") == pytest.approx(2.0, abs=0.1)
    assert sim.charged_s("normal") == pytest.approx(8.0, abs=0.15)  # all high leaves
    assert sim.charged_s("low") < 0.1  # normal saturates: low gets what normal leaves


@pytest.mark.parametrize(("percent", "policy"), [(30, "fixed"), (20, "share")])
def test_high_inference_beside_a_low_trainer(percent: int, policy: str) -> None:
    """2 ms requests at 50/s, Poisson: the GPU within a quantum of asking, the trainer keeps
    what the requests leave. (A `fixed` 20 for this 10-15 % load runs out of credit in bursts:
    a `fixed` container saves at most a quantum while idle.)"""
    sim = Sim()
    add(sim, "trainer", 80, "share", "low")
    inference = Requests(sim, "high", percent, policy, "high")
    serve(sim, inference, 10, 50, 2)
    waits = [lat - 2 * MS for lat in inference.latencies]
    assert len(waits) > 400
    # every request starts within a quantum of its arrival (here the holder drains at once; a
    # request that came while another ran waits for it)
    assert max(waits) < 20 * MS
    assert p99(inference.latencies) <= 8
    left = 10_000 - sim.held["high"]
    assert sim.held["trainer"] >= 0.95 * left


def test_normal_inference_beside_a_normal_trainer_waits_for_turns() -> None:
    """The baseline the priority is judged against: a request waits for the trainer's turn."""
    sim = Sim()
    add(sim, "trainer", 80, "share", "normal")
    inference = Requests(sim, "infer", 20, "share", "normal")
    serve(sim, inference, 10, 50, 2)
    assert p99(inference.latencies) > 10


def test_a_stopped_high_waiter_blocks_nobody() -> None:
    sim = Sim()
    add(sim, "low", 100, "share", "low")
    sim.run(0.01)
    gpu = sim.gpu
    gpu.set_limit("high", 50, "share", "high")
    gpu.connect("high/0", "high", sim.now)
    gpu.want("high/0", sim.now)  # then SIGSTOPped: it never launches, never answers
    stopped_at = sim.now
    sim.settle()
    assert gpu.holder == "high"
    for _ in range(40):
        sim.run(0.001)
        if gpu.draining() == ["high/0"]:
            gpu.stopped("high/0", sim.now)  # the arbiter's check of peers that owe DONE
    assert gpu.holder == "low"
    assert revoke_time(sim, "high/0") == stopped_at + 20 * MS  # its quantum
    sim.run(1)
    assert sim.held["low"] >= 1000  # and it does not come back: it wants nothing


def test_a_holder_revoked_for_high_has_a_preemptible_grant_to_drain() -> None:
    sim = Sim()
    (low,) = add(sim, "low", 100, "share", "low")
    sim.run(0.005)
    sim.saturating.discard(low)  # it will not answer the REVOKE
    inference = Requests(sim, "high", 10, "fixed", "high")
    inference.arrive()
    asked = sim.now
    sim.run(0.030)
    assert revoke_time(sim, low) == asked
    assert sim.gpu.holder == "high"
    granted = next(t for t, c, o in sim.sent if c == inference.conn and o.kind == "grant")
    assert granted == asked + PREEMPTIBLE  # what a grant beside it admits
    assert sim.gpu.usage(sim.now)["low"].forced_revokes == 1


def test_a_quantum_revoke_under_way_is_cut_short_for_a_high_waiter() -> None:
    sim = Sim()
    (low,) = add(sim, "low", 50, "share", "low")
    sim.run(0.005)
    add(sim, "normal", 50, "share", "normal")
    sim.saturating.discard(low)
    sim.run(0.025)  # low's quantum ended at 20 ms; it has not drained
    revoked = revoke_time(sim, low)
    assert revoked == 20 * MS
    assert sim.gpu.holder == "low"
    Requests(sim, "high", 10, "fixed", "high").arrive()
    asked = sim.now
    sim.run(0.030)
    forced = [t for t, c, o in sim.sent if c == "high/0" and o.kind == "grant"]
    assert revoked + 2 * 20 * MS > asked  # the normal deadline is still ahead
    assert forced and forced[0] == max(asked, revoked + PREEMPTIBLE)  # not two quanta


def test_grants_beside_a_high_container_admit_a_twentieth_of_a_quantum() -> None:
    sim = Sim()
    add(sim, "low", 50, "share", "low")
    sim.run(0.005)
    assert sim.gpu.grant_work_ns() == 20 * 20 * MS  # alone: twenty quanta
    inference = Requests(sim, "high", 10, "fixed", "high")  # connected, idle
    assert sim.gpu.holder == "low"
    assert sim.gpu.grant_work_ns() == PREEMPTIBLE == 1 * MS
    inference.arrive()
    sim.settle()
    assert sim.gpu.holder == "high"
    assert sim.gpu.grant_work_ns() > PREEMPTIBLE  # the high holder's own grants are not cut


def test_the_status_file_shows_the_priority() -> None:
    sim = Sim()
    add(sim, "a", 30, "fixed", "high")
    add(sim, "b", 70, "share", "low")
    sim.run(0.1)
    rendered = status.render({"GPU-x": sim.gpu}, {}, sim.now, 0, 0)
    containers = rendered["gpus"]["GPU-x"]["containers"]
    assert containers["a"]["priority"] == "high"
    assert containers["b"]["priority"] == "low"


PRIORITY_MIXES = {
    "high fixed 30 + low share 70": [("a", 30, "fixed", "high"), ("b", 70, "share", "low")],
    "high fixed 10 + normal share 50 + low share 40": [
        ("a", 10, "fixed", "high"),
        ("b", 50, "share", "normal"),
        ("c", 40, "share", "low"),
    ],
    "high share 40 + high fixed 20 + low": [
        ("a", 40, "share", "high"),
        ("b", 20, "fixed", "high"),
        ("c", 40, "share", "low"),
    ],
    "normal fixed 20 + low share 60": [("a", 20, "fixed", "normal"), ("b", 60, "share", "low")],
}


@pytest.mark.parametrize("mix", list(PRIORITY_MIXES))
def test_stepping_at_the_deadlines_gives_what_a_tick_gives_with_priorities(mix: str) -> None:
    ticked, woken = Sim(), DeadlineSim()
    for sim in (ticked, woken):
        for name, percent, policy, priority in PRIORITY_MIXES[mix]:
            add(sim, name, percent, policy, priority, conns=2)
        sim.run(5)
    for name, *_ in PRIORITY_MIXES[mix]:
        assert woken.charged_s(name) == pytest.approx(ticked.charged_s(name), abs=0.05)
    assert woken.wakeups < 5000 / 4


def test_a_stopped_high_holder_is_revoked_at_its_quantum_deadline() -> None:
    sim = DeadlineSim()
    add(sim, "low", 100, "share", "low")
    sim.run(0.01)
    gpu = sim.gpu
    gpu.set_limit("high", 50, "share", "high")
    gpu.connect("high/0", "high", sim.now)
    gpu.want("high/0", sim.now)
    sim.settle()
    granted = sim.now
    assert gpu.holder == "high"
    # no event comes: the arbiter must still wake at the quantum's end to revoke it
    assert gpu.next_deadline(sim.now) == granted + 20 * MS


def test_discovery_gives_the_arbiter_each_containers_priority(tmp_path) -> None:
    uuid = "GPU-5eed0000-0000-4000-8000-000000000000"
    for name, share in {"old": (30, "share"), "new": (40, "fixed", "high")}.items():
        write_config(tmp_path / name, {uuid: 1 << 30}, {uuid: share})
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "cgpu.conf").write_text(f"version 1\ndevice {uuid} 1GiB\ncompute {uuid} 30 fixed top\n")
    found = Discovery([tmp_path])
    assert found.scan() == {
        tmp_path / "old": {uuid: (30, "share", "normal")},
        tmp_path / "new": {uuid: (40, "fixed", "high")},
    }
    assert found.bad_configs == 1  # read as no compute line: fails closed, counted


def test_renewals_beside_a_high_container_wait_for_the_queue_to_run() -> None:
    """A trainer whose launches say SPENT faster than its kernels run is renewed only once
    what it queued is down to one preemptible grant, and the arbiter wakes for it."""
    sim = Sim()
    (low,) = add(sim, "low", 90, "share", "low")
    sim.saturating.discard(low)
    Requests(sim, "high", 10, "fixed", "high")  # connected, idle
    sim.settle()
    gpu, epoch = sim.gpu, sim.gpu.epoch
    queued: list[int] = []
    renewals = 0
    for _ in range(200):  # every 0.25 ms, if its grant was renewed, it spends another 1 ms
        open_grant = sim.orders_to(low, "grant")
        if len(open_grant) > renewals:
            renewals = len(open_grant)
            gpu.spent(low, epoch, 1 * MS, sim.now)
            gpu.want(low, sim.now)
        sim.settle()
        token = gpu._token
        assert token is not None
        queued.append(token.queued_until - sim.now)
        sim.now += MS // 4
    assert max(queued) <= LEAD + 1 * MS  # renewed at the lead, plus what it then admits
    assert renewals > 20  # it is still served: the GPU does not idle for it
    # no event: the arbiter must wake when the queue is down to the lead
    gpu.spent(low, epoch, 3 * MS, sim.now)
    gpu.step(sim.now)
    token = gpu._token
    assert gpu.next_deadline(sim.now) == token.queued_until - LEAD


def test_a_best_effort_container_takes_turns_at_its_pods_priority(tmp_path) -> None:
    """A container without a limit, on a GPU where another has one, is best effort at the
    priority the host recorded for its pod (meta.json's compute_priority, written by the device
    plugin or the DRA driver from cgpu.io/compute-priority or a ComputeConfig); normal without
    one, and normal for a value the host could not have written."""
    from cgpu.core.containers import write_meta

    uuid = "GPU-5eed0000-0000-4000-8000-000000000000"
    for name, compute in (
        ("limited", {uuid: (30, "fixed", "high")}),
        ("trainer", {}),
        ("plain", {}),
    ):
        (tmp_path / name).mkdir()
        write_config(tmp_path / name, {uuid: 1 << 30}, compute)
    write_meta(tmp_path / "trainer", {"compute_priority": "low"})
    write_meta(tmp_path / "plain", {"compute_priority": "urgent"})
    found = Discovery([tmp_path])
    assert found.scan() == {
        tmp_path / "limited": {uuid: (30, "fixed", "high")},
        tmp_path / "trainer": {uuid: (0, "best-effort", "low")},
        tmp_path / "plain": {uuid: (0, "best-effort", "normal")},
    }
    write_meta(tmp_path / "plain", {"compute_priority": "high"})  # the host's record changed
    assert found.scan()[tmp_path / "plain"] == {uuid: (0, "best-effort", "high")}


def test_a_trainer_beside_a_refilling_high_container_is_granted_as_usual_until_its_turn_nears():
    """A `high` `fixed` container that never idles cannot take the GPU before its credit comes
    back: until then a `low` trainer's grants are the usual ones (uncounted), not a preemptible
    grant's work at a time (its renewals' round trips idled the GPU: the trainer got 15-55 of
    the 75 left); near the `high` one's turn they are preemptible and counted, so that what
    must drain when it comes stays short. The reservation and the rest hold either way."""
    sim = Sim()
    add(sim, "low", 75, "share", "low")
    add(sim, "high", 25, "fixed", "high")
    gpu = sim.gpu
    held_as: Counter[tuple[bool, bool]] = Counter()  # (preemptible grants, counted) while low held
    counted_before_high: list[bool] = []  # low's grants were counted in the ms before high's turn
    last, counted = None, False
    for _ in range(5000):
        sim.settle()
        holder = gpu.holder
        if holder == "high" and last == "low":
            counted_before_high.append(counted)
        if holder == "low":
            counted = gpu.counted_grants()
            held_as[(gpu.grant_work_ns() == PREEMPTIBLE, counted)] += 1
        last = holder
        sim.held[holder] += 1
        sim.now += MS
    assert sim.charged_s("high") == pytest.approx(1.25, abs=0.1)
    assert sim.charged_s("low") == pytest.approx(3.75, abs=0.15)
    low_ms = sum(held_as.values())
    assert held_as[(False, False)] >= 0.7 * low_ms, held_as  # mostly usual grants
    assert held_as[(True, False)] == held_as[(False, True)] == 0, held_as
    assert counted_before_high and all(counted_before_high), counted_before_high


def test_a_best_effort_container_gets_what_a_low_limited_one_leaves() -> None:
    """A container without a limit gets what the limited ones leave, `low` ones included: beside
    a saturating `low` `share` 70 trainer (and an idle `high` inference), a `normal` best-effort
    container gets nothing while the trainer has work (ranked at its priority it took 70-80 of
    the GPU and the trainer got 0). A `high` best-effort one still comes before both."""
    sim = Sim()
    add(sim, "trainer", 70, "share", "low")
    add(sim, "plain", 0, "best-effort", "normal")
    Requests(sim, "infer", 30, "share", "high")  # connected, idle
    sim.run(2)
    assert sim.charged_s("trainer") == pytest.approx(2.0, abs=0.05)
    assert sim.charged_s("plain") < 0.05
    add(sim, "urgent", 0, "best-effort", "high")
    sim.run(2)
    assert sim.charged_s("urgent") == pytest.approx(2.0, abs=0.1)  # high, and it never idles


def test_a_long_launch_waits_out_a_high_refill_and_is_granted_when_it_ends() -> None:
    """A trainer whose launches are longer than a grant (its SPENTs say 30 ms) is not granted
    one that would still run when a `high` `fixed` container's credit is back (20 ms away):
    the GPU idles less than that launch, and the arbiter wakes at the refill's end, when it is
    granted (the `high` one, idle, does not want it), with no event to wake it."""
    sim = Sim()
    gpu = sim.gpu
    gpu.set_limit("high", 25, "fixed", "high")
    gpu.connect("high/0", "high", sim.now)  # connected, idle
    high = gpu._tenants["high"]
    high.credit_ns, high.refilling = 15 * MS, True  # a quantum's refill: 5 ms of credit, 20 ms
    add(sim, "low", 75, "share", "low")
    trainer = gpu._tenants["low"]
    trainer.spent_past_grant, trainer.spent_work_ns = True, 30 * MS
    assert gpu.step(sim.now) == []  # not granted: it would outlast the wait
    due = gpu.next_deadline(sim.now)
    assert due == 20 * MS
    sim.now = due
    orders = gpu.step(sim.now)
    assert [(conn, order.kind) for conn, order in orders] == [("low/0", "grant")]
