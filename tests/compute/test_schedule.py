"""The per-GPU scheduler, driven in simulated time (no sockets, no clock).

Fake processes stand for a container's connections: a saturating one wants the GPU whenever it
does not hold it and answers a REVOKE with DONE at once. Shares are judged by the time each
container was charged, and by which container held the token at each simulated millisecond.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from cgpu.compute import status
from cgpu.compute.schedule import GpuSchedule
from cgpu.compute.turnstate import Order, Phase

MS = 1_000_000
SECOND = 1000 * MS


class Sim:
    """One GPU's schedule stepped every simulated millisecond, as the arbiter's loop does."""

    def __init__(
        self,
        quantum_ms: int = 20,
        idle_release_ms: int = 2,
        drain_cap_ms: int = 1000,
        late_want: bool = False,
    ) -> None:
        self.gpu: GpuSchedule[str] = GpuSchedule(
            quantum_ms * MS, drain_cap_ms * MS, idle_release_ms * MS, now=0
        )
        self.now = 0
        self.held: Counter[str | None] = Counter()  # ms each container held the token
        self.sent: list[tuple[int, str, Order]] = []
        self.saturating: set[str] = set()  # connections that answer REVOKE and want again
        # late_want: a revoked connection's WANT arrives only after the arbiter has stepped on
        # its DONE (so the token has gone elsewhere), as over a socket
        self.late_want = late_want

    def add(self, name: str, percent: int, policy: str, conns: int = 1) -> list[str]:
        """A container with `conns` saturating connections."""
        self.gpu.set_limit(name, percent, policy)
        made = [f"{name}/{i}" for i in range(conns)]
        for conn in made:
            self.gpu.connect(conn, name, self.now)
            self.gpu.want(conn, self.now)
            self.saturating.add(conn)
        return made

    def settle(self) -> list[tuple[str, Order]]:
        """Step at `now` until nothing more is sent; saturating connections answer at once."""
        out = []
        late: list[str] = []
        for _ in range(50):
            orders = self.gpu.step(self.now)
            for conn in late:
                self.gpu.want(conn, self.now)
            if not orders and not late:
                return out
            late = []
            out += orders
            self.sent += [(self.now, conn, order) for conn, order in orders]
            for conn, order in orders:
                if order.kind == "revoke" and conn in self.saturating:
                    self.gpu.done(conn, order.epoch, self.now)
                    if self.late_want:
                        late.append(conn)
                    else:
                        self.gpu.want(conn, self.now)
        raise AssertionError("the schedule never settles")

    def run(self, seconds: float) -> None:
        for _ in range(round(seconds * 1000)):
            self.settle()
            self.held[self.gpu.holder] += 1
            self.now += MS
        self.settle()

    def charged_s(self, name: str) -> float:
        return self.gpu.usage(self.now)[name].charged_ns / SECOND

    def orders_to(self, conn: str, kind: str) -> list[Order]:
        return [order for _, c, order in self.sent if c == conn and order.kind == kind]


@pytest.mark.parametrize("late_want", [False, True], ids=["want-with-done", "want-after-done"])
@pytest.mark.parametrize("percents", [(30, 70), (20, 30, 50)])
def test_saturating_share_containers_split_the_gpu_by_their_percents(percents, late_want) -> None:
    sim = Sim(late_want=late_want)
    for i, percent in enumerate(percents):
        sim.add(f"c{i}", percent, "share")
    sim.run(10)
    for i, percent in enumerate(percents):
        assert sim.charged_s(f"c{i}") == pytest.approx(percent / 10, abs=0.1)
    assert sim.held[None] <= 1  # the GPU is never left free


@pytest.mark.parametrize("late_want", [False, True], ids=["want-with-done", "want-after-done"])
def test_two_fixed_30_get_30_each_and_leave_the_rest_free(late_want: bool) -> None:
    sim = Sim(late_want=late_want)
    sim.add("a", 30, "fixed")
    sim.add("b", 30, "fixed")
    sim.run(10)
    assert sim.charged_s("a") == pytest.approx(3.0, abs=0.05)
    assert sim.charged_s("b") == pytest.approx(3.0, abs=0.05)  # waiting is not idleness
    assert sim.held[None] == pytest.approx(4000, abs=50)


def test_fixed_30_alone_gets_30_in_holds_of_about_a_quantum() -> None:
    sim = Sim()
    (conn,) = sim.add("a", 30, "fixed")
    sim.run(10)
    assert sim.charged_s("a") == pytest.approx(3.0, abs=0.1)
    assert sim.held["a"] == pytest.approx(3000, abs=100)
    # each drain costs the GPU's pipeline: holds are not cut into milliseconds
    assert len(sim.orders_to(conn, "grant")) < 200


def test_unmanaged_load_makes_a_fixed_30_hold_60_percent() -> None:
    sim = Sim()
    sim.add("a", 30, "fixed")
    sim.gpu.set_unmanaged(1.0)  # one busy process beside the holder's one: f = 0.5
    sim.run(10)
    assert sim.held["a"] == pytest.approx(6000, abs=100)
    assert sim.charged_s("a") == pytest.approx(3.0, abs=0.1)


def test_f_is_never_below_a_fifth() -> None:
    sim = Sim()
    sim.add("a", 10, "fixed")
    sim.gpu.set_unmanaged(100.0)
    sim.run(10)
    assert sim.held["a"] == pytest.approx(5000, abs=100)  # 10% charged at f = 0.2


@pytest.mark.parametrize("late_want", [False, True], ids=["want-with-done", "want-after-done"])
def test_a_fixed_container_beside_a_share_one_gets_its_percent_and_no_more(late_want: bool) -> None:
    sim = Sim(late_want=late_want)
    sim.add("fixed", 30, "fixed")
    sim.add("share", 20, "share")
    sim.run(10)
    assert sim.charged_s("fixed") == pytest.approx(3.0, abs=0.1)
    assert sim.charged_s("share") == pytest.approx(7.0, abs=0.1)


@pytest.mark.parametrize("late_want", [False, True], ids=["want-with-done", "want-after-done"])
@pytest.mark.parametrize("fixed,share", [(20, 40), (10, 90)])
def test_a_fixed_container_keeps_its_percent_where_the_limited_ones_get_half_the_gpu(
    fixed: int, share: int, late_want: bool
) -> None:
    """Beside an unlimited container (f = 0.5) the limited ones get half the GPU together:
    `fixed` still gets its percent, `share` what is left (by virtual time alone, `fixed` 20
    beside `share` 40 got a third of the turns, 16.7; an H200 gave it 10)."""
    sim = Sim(late_want=late_want)
    sim.add("fixed", fixed, "fixed")
    sim.add("share", share, "share")
    sim.gpu.set_unmanaged(1.0)
    sim.run(10)
    assert sim.charged_s("fixed") == pytest.approx(fixed / 10, abs=0.1)
    assert sim.charged_s("share") == pytest.approx(5 - fixed / 10, abs=0.1)
    assert sim.held[None] <= 1


def test_a_busy_share_container_alone_is_never_revoked_but_is_charged() -> None:
    sim = Sim()
    (conn,) = sim.add("a", 50, "share")
    sim.run(10)
    assert sim.orders_to(conn, "revoke") == []
    assert len(sim.orders_to(conn, "grant")) == 1
    assert sim.charged_s("a") == pytest.approx(10.0, abs=0.03)  # charged every quantum
    assert sim.gpu.usage(sim.now)["a"].share == pytest.approx(10_000, abs=10)


def test_a_newcomer_gets_no_advantage_from_the_time_before_it_came() -> None:
    sim = Sim()
    sim.add("old", 50, "share")
    sim.run(5)
    sim.add("new", 50, "share")
    sim.run(5)
    assert sim.charged_s("new") == pytest.approx(2.5, abs=0.1)
    assert sim.charged_s("old") == pytest.approx(7.5, abs=0.1)


def test_a_container_back_from_idle_gets_no_advantage_either() -> None:
    sim = Sim()
    sim.add("steady", 50, "share")
    (conn,) = sim.add("bursty", 50, "share")
    sim.run(1)
    sim.saturating.discard(conn)  # answers its next REVOKE, then wants nothing for 3 s
    sim.run(0.1)
    sim.gpu.done(conn, sim.orders_to(conn, "revoke")[-1].epoch, sim.now)
    sim.run(3)
    before = sim.charged_s("bursty")
    sim.saturating.add(conn)
    sim.gpu.want(conn, sim.now)
    sim.run(2)
    assert sim.charged_s("bursty") - before == pytest.approx(1.0, abs=0.1)


def test_an_idle_holder_gives_the_token_at_once_to_a_waiter() -> None:
    sim = Sim()
    (a,) = sim.add("a", 50, "share")
    sim.saturating.discard(a)
    sim.run(0.001)
    sim.gpu.idle(a, sim.now)
    sim.run(0.001)
    (b,) = sim.add("b", 50, "share")
    (revoke,) = [o for c, o in sim.settle() if c == a and o.kind == "revoke"]
    sim.gpu.done(a, revoke.epoch, sim.now)
    assert [(c, o.kind) for c, o in sim.settle()] == [(b, "grant")]  # at the same instant


def test_an_idle_holder_alone_keeps_the_token_for_idle_release() -> None:
    sim = Sim(idle_release_ms=5)
    (a,) = sim.add("a", 50, "share")
    sim.settle()
    sim.gpu.idle(a, sim.now)
    sim.run(0.004)
    assert sim.orders_to(a, "revoke") == []
    sim.run(0.002)
    assert len(sim.orders_to(a, "revoke")) == 1


def test_busy_after_idle_keeps_the_token() -> None:
    sim = Sim(idle_release_ms=5)
    (a,) = sim.add("a", 50, "share")
    sim.settle()
    sim.gpu.idle(a, sim.now)
    sim.run(0.003)
    sim.gpu.busy(a)
    sim.run(1)
    assert sim.orders_to(a, "revoke") == []


def test_a_spent_holder_alone_is_granted_again_at_once() -> None:
    sim = Sim()
    (a,) = sim.add("a", 50, "share")
    sim.settle()
    (grant,) = sim.orders_to(a, "grant")
    sim.gpu.spent(a, grant.epoch, 50 * MS, sim.now)
    assert [(c, o.kind, o.epoch) for c, o in sim.settle()] == [(a, "grant", grant.epoch)]
    sim.run(1)
    assert sim.orders_to(a, "revoke") == []


def test_a_spent_holder_gives_way_at_once_when_its_queued_work_puts_it_ahead() -> None:
    # A grant of 50 ms kernels admits one: the holder says SPENT as it launches it. Counting that
    # kernel, the holder is ahead of the waiter: its turn ends now (the kernel drains), not at
    # the quantum, when it would have queued another.
    sim = Sim()
    (a,) = sim.add("a", 50, "share")
    sim.add("b", 50, "share")
    sim.saturating.discard(a)
    sim.run(0.005)
    assert sim.gpu.holder == "a" and sim.orders_to(a, "revoke") == []
    sim.gpu.spent(a, sim.orders_to(a, "grant")[0].epoch, 50 * MS, sim.now)
    assert [(c, o.kind) for c, o in sim.settle()] == [(a, "revoke")]
    assert sim.gpu.draining() == [a]


def _refill_gap_ms(said_ms: int) -> float:
    """`fixed` 20 alone, one connection: granted at 0 (its credit a quantum, 20 ms; its grant
    admits 2 quanta, 40 ms), SPENT at once saying it queued `said_ms`, drained that long later;
    the ms from its DONE (and WANT) to its next GRANT."""
    sim = Sim()
    (a,) = sim.add("a", 20, "fixed")
    sim.saturating.discard(a)
    sim.settle()
    (grant,) = sim.orders_to(a, "grant")
    assert sim.gpu.grant_work_ns() == 40 * MS
    sim.gpu.spent(a, grant.epoch, said_ms * MS, sim.now)
    sim.settle()
    (revoke,) = sim.orders_to(a, "revoke")
    sim.run(said_ms / 1000)
    sim.gpu.done(a, revoke.epoch, sim.now)
    sim.gpu.want(a, sim.now)
    done_at = sim.now
    while len(sim.orders_to(a, "grant")) == 1:
        sim.run(0.001)
    return (sim.now - done_at) / MS


def test_a_spent_fixed_container_refills_a_quantum_unless_its_kernel_outran_the_grant() -> None:
    # Charged its drain, its credit is 20 + 0.2 * d - d after a drain of d ms. What it said it
    # queued within its grant's 40 ms is short kernels: it waits for a quantum of credit, (20 -
    # (20 - 0.8 * 40)) / 0.2 = 160 ms (waiting for the 40 ms it said, alone its grants and
    # refills grew to its credit: 100 ms turns every 0.55 s, 1 s windows 12-23 for 20). Past the
    # grant, 70 ms: a kernel longer than a grant, it waits for that much, (70 + 36) / 0.2.
    assert _refill_gap_ms(40) == pytest.approx(160, abs=3)
    assert _refill_gap_ms(70) == pytest.approx(530, abs=3)


def test_late_drains_of_one_containers_connections_are_charged_once() -> None:
    # Two connections of a are forced to end their drain and answer 10 ms into b's turn, side
    # by side: a is charged that time once (half of it, beside b's busy connection), not once
    # per connection (16 processes of 50 ms kernels were charged 4.2 s for one forced revoke).
    sim = Sim()
    conns = sim.add("a", 50, "share", conns=2)
    sim.saturating.difference_update(conns)
    sim.settle()
    sim.add("b", 50, "share")
    sim.run(0.061)  # a quantum, then forced at 40 ms after the REVOKE
    assert sim.gpu.holder == "b"
    (revoke,) = sim.orders_to(conns[0], "revoke")
    charged = sim.gpu.usage(sim.now)["a"].charged_ns
    sim.run(0.010)
    for conn in conns:
        sim.gpu.done(conn, revoke.epoch, sim.now)
    late = sim.gpu.usage(sim.now)["a"].charged_ns - charged
    assert late == pytest.approx(5.5 * MS, abs=1 * MS)


def test_spent_for_another_epoch_or_while_draining_is_ignored() -> None:
    sim = Sim()
    a, _, revoke = _holder_revoked(sim)
    sim.gpu.spent(a, revoke.epoch, 50 * MS, sim.now)
    sim.gpu.spent(a, revoke.epoch + 1, 50 * MS, sim.now)
    assert sim.settle() == [] and sim.gpu.draining() == [a]


def _holder_revoked(sim: Sim) -> tuple[str, str, Order]:
    """a holds with one quiet connection, b waits; returns (a's conn, b's conn, the REVOKE)."""
    (a,) = sim.add("a", 50, "share")
    sim.saturating.discard(a)
    sim.settle()
    (b,) = sim.add("b", 50, "share")
    sim.run(0.020)  # a quantum: a is revoked
    (revoke,) = sim.orders_to(a, "revoke")
    assert sim.gpu.phase is Phase.REVOKING and sim.gpu.draining() == [a]
    return a, b, revoke


@pytest.mark.parametrize("how", ["done", "stopped", "gone"])
def test_a_revoke_ends_as_soon_as_the_holder_is_drained(how: str) -> None:
    sim = Sim()
    a, b, revoke = _holder_revoked(sim)
    sim.run(0.005)
    assert sim.gpu.holder == "a" and sim.orders_to(b, "grant") == []
    if how == "done":
        sim.gpu.done(a, revoke.epoch, sim.now)
    elif how == "stopped":
        sim.gpu.stopped(a, sim.now)
    else:
        sim.gpu.gone(a, sim.now)
    sim.settle()
    assert sim.gpu.holder == "b"
    assert sim.orders_to(b, "grant")[0].epoch == revoke.epoch + 1
    assert sim.gpu.usage(sim.now)["a"].forced_revokes == 0


def test_a_flagged_container_keeps_the_token_for_its_tail_after_its_drain() -> None:
    # Flagged for out-of-turn work (set_tails): its hold ends its tail after the stop, the token
    # kept (what it queued past its gate runs then, alone), charged to it and logged as its
    # hold; then the next container is granted. Without a tail, at once.
    sim = Sim()
    sim.gpu.set_limit("a", 50, "share")
    sim.gpu.set_tails({"a": 20 * MS, "nobody": 5 * MS})
    a, b, revoke = _holder_revoked(sim)
    sim.gpu.stopped(a, sim.now)  # the arbiter stopped its processes at the REVOKE
    stopped_at = sim.now
    before = sim.gpu.usage(sim.now)["a"].charged_ns
    sim.settle()
    assert sim.gpu.holder == "a" and sim.orders_to(b, "grant") == []
    assert sim.gpu.next_deadline(sim.now) == stopped_at + 20 * MS
    sim.now += 20 * MS - 1
    sim.settle()
    assert sim.gpu.holder == "a"
    sim.now += 1
    sim.settle()
    assert sim.gpu.holder == "b" and sim.orders_to(b, "grant")[0].epoch == revoke.epoch + 1
    # charged its quantum and its tail (the hold's charge comes at its end)
    assert sim.gpu.usage(sim.now)["a"].charged_ns - before == pytest.approx(40 * MS, rel=0.01)
    assert sim.gpu.holds_since(stopped_at, sim.now)[0].end == stopped_at + 20 * MS


def test_a_tail_ends_with_the_flag() -> None:
    sim = Sim()
    sim.gpu.set_limit("a", 50, "share")
    sim.gpu.set_tails({"a": 20 * MS})
    sim.gpu.set_tails({})  # no longer flagged
    a, _, _ = _holder_revoked(sim)
    sim.gpu.stopped(a, sim.now)
    sim.settle()
    assert sim.gpu.holder == "b"


def test_done_for_another_epoch_is_ignored() -> None:
    sim = Sim()
    a, _, revoke = _holder_revoked(sim)
    sim.gpu.done(a, revoke.epoch + 1, sim.now)
    sim.gpu.done(a, revoke.epoch - 1, sim.now)
    sim.settle()
    assert sim.gpu.holder == "a" and sim.gpu.draining() == [a]


def test_a_holder_that_never_drains_loses_the_token_within_two_quanta() -> None:
    sim = Sim()
    a, _, _ = _holder_revoked(sim)
    sim.run(0.039)
    assert sim.gpu.holder == "a"
    sim.run(0.002)
    assert sim.gpu.holder == "b"
    assert sim.gpu.usage(sim.now)["a"].forced_revokes == 1
    # the undrained time was charged: a had 20 ms granted plus 40 ms of drain
    assert sim.gpu.usage(sim.now)["a"].charged_ns == pytest.approx(60 * MS, abs=2 * MS)
    # the hold in the log ends where the token moved on; it was revoked at 20 ms
    (hold,) = [h for h in sim.gpu.holds_since(0, sim.now) if h.container == "a"]
    assert hold.revoke == revoke_time(sim, a) and hold.end - hold.revoke == 40 * MS


def revoke_time(sim: Sim, conn: str) -> int:
    return next(t for t, c, order in sim.sent if c == conn and order.kind == "revoke")


def test_a_shorter_drain_cap_still_bounds_the_wait() -> None:
    sim = Sim(drain_cap_ms=10)
    _holder_revoked(sim)
    sim.run(0.011)
    assert sim.gpu.holder == "b"


def test_a_late_done_is_charged_and_ends_the_hold_in_the_log() -> None:
    sim = Sim()
    a, _, revoke = _holder_revoked(sim)
    sim.run(0.041)  # forced at 40 ms after the REVOKE; b holds and runs
    assert sim.gpu.holder == "b"
    charged = sim.gpu.usage(sim.now)["a"].charged_ns
    sim.run(0.010)
    sim.gpu.done(a, revoke.epoch, sim.now)  # its queue drained 10 ms into b's turn
    late = sim.gpu.usage(sim.now)["a"].charged_ns - charged
    # a and b's one busy connection ran side by side: half of the late 11 ms each
    assert late == pytest.approx(5.5 * MS, abs=1 * MS)
    (hold,) = [h for h in sim.gpu.holds_since(0, sim.now) if h.container == "a"]
    assert hold.end == sim.now
    # a second DONE for that epoch changes nothing
    sim.gpu.done(a, revoke.epoch, sim.now + MS)
    assert sim.gpu.usage(sim.now)["a"].charged_ns - charged == late


def test_holds_since_names_each_holder_and_the_current_hold() -> None:
    sim = Sim()
    sim.add("a", 50, "share")
    sim.add("b", 50, "share")
    sim.run(0.2)
    holds = sim.gpu.holds_since(0, sim.now)
    assert {h.container for h in holds} == {"a", "b"}
    assert holds[-1].end == sim.now and holds[-1].container == sim.gpu.holder
    assert all(h.start <= h.end for h in holds)
    assert all(x.end <= y.start for x, y in itertools.pairwise(holds))  # one holder at a time
    assert sim.gpu.holds_since(sim.now - 30 * MS, sim.now)[0].end >= sim.now - 30 * MS


@pytest.mark.parametrize("policy", ["fixed", "share"])
def test_work_charged_outside_the_turns_comes_out_of_later_turns(policy: str) -> None:
    sim = Sim()
    sim.add("a", 30, policy)
    sim.add("b", 70 if policy == "share" else 30, policy)
    sim.run(1)
    sim.gpu.charge_outside("a", 300 * MS, sim.now)
    sim.gpu.charge_outside("nobody", 300 * MS, sim.now)  # an unknown container: ignored
    before = {name: sim.charged_s(name) for name in "ab"}
    sim.run(3)
    gained_a = sim.charged_s("a") - before["a"]
    usage = sim.gpu.usage(sim.now)["a"]
    assert usage.out_of_turn_ns == 300 * MS
    # over the 3 s, a's turns plus its 0.3 s outside them make its share: 0.9 s in all
    assert gained_a == pytest.approx(0.9 - 0.3, abs=0.1)


def test_a_holder_whose_connections_all_close_frees_the_token_at_once() -> None:
    sim = Sim()
    (a,) = sim.add("a", 50, "share")
    sim.settle()
    (b,) = sim.add("b", 50, "share")
    sim.gpu.gone(a, sim.now)
    assert [(c, o.kind) for c, o in sim.settle()] == [(b, "grant")]


def test_a_connection_that_joins_a_holder_is_granted_at_once() -> None:
    sim = Sim()
    (a,) = sim.add("a", 50, "share")
    sim.settle()
    sim.gpu.connect("a/late", "a", sim.now)
    (grant,) = [o for c, o in sim.settle() if c == "a/late"]
    assert grant == Order("grant", sim.orders_to(a, "grant")[0].epoch, grant.share)


def test_a_grant_goes_to_every_connection_and_a_revoke_to_every_granted_one() -> None:
    sim = Sim()
    a_conns = sim.add("a", 50, "share", conns=3)
    sim.saturating.difference_update(a_conns[1:])  # two of them never asked
    sim.settle()
    sim.add("b", 50, "share")
    sim.run(0.020)
    for conn in a_conns:
        assert [o.kind for o in sim.orders_to(conn, "grant") + sim.orders_to(conn, "revoke")] == [
            "grant",
            "revoke",
        ]
    assert sorted(sim.gpu.draining()) == a_conns[1:]


def test_a_grant_reports_the_share_of_the_last_second() -> None:
    sim = Sim()
    (a,) = sim.add("a", 30, "share")
    (b,) = sim.add("b", 70, "share")
    sim.run(5)
    assert sim.orders_to(a, "grant")[-1].share == pytest.approx(3000, abs=200)
    assert sim.orders_to(b, "grant")[-1].share == pytest.approx(7000, abs=200)


def test_a_limit_change_applies_from_the_next_grant() -> None:
    sim = Sim()
    sim.add("a", 50, "share")
    sim.add("b", 50, "share")
    sim.settle()
    holder = sim.gpu.holder
    assert holder is not None
    sim.gpu.set_limit(holder, 20, "fixed")
    assert sim.gpu.usage(sim.now)[holder].percent == 50
    sim.run(0.021)
    assert (sim.gpu.usage(sim.now)[holder].percent, sim.gpu.usage(sim.now)[holder].policy) == (
        20,
        "fixed",
    )
    before = sim.charged_s(holder)
    sim.run(2)
    assert sim.charged_s(holder) - before == pytest.approx(0.4, abs=0.05)  # 20% from then on


def test_a_removed_container_frees_the_token() -> None:
    sim = Sim()
    sim.add("a", 50, "share")
    sim.add("b", 50, "share")
    sim.settle()
    sim.gpu.remove(sim.gpu.holder or "", sim.now)
    sim.settle()
    assert sim.gpu.holder == "b" and sim.gpu.containers == ["b"]


def test_held_time_is_logged_for_the_estimator() -> None:
    sim = Sim()
    sim.add("a", 30, "fixed")
    sim.run(2)
    held = sim.gpu.held_ns(1 * SECOND, 2 * SECOND, sim.now)
    assert held == pytest.approx(0.3 * SECOND, abs=25 * MS)


@pytest.mark.parametrize("percent, policy", [(0, "share"), (101, "fixed"), (50, "both")])
def test_limits_out_of_range_are_refused(percent: int, policy: str) -> None:
    with pytest.raises(ValueError):
        Sim().gpu.set_limit("a", percent, policy)


def test_a_grant_counts_the_holders_busy_processes() -> None:
    # Each busy process of a container queues its own work ahead, so the grant tells them how
    # many they are (with several, each counts the work budget whatever its kernels' length);
    # one that went idle is not counted.
    sim = Sim()
    assert sim.gpu.sharers() == 1  # nobody holds the token
    conns = sim.add("a", 30, "share", conns=3)
    sim.settle()
    assert sim.gpu.holder == "a" and sim.gpu.sharers() == 3
    sim.gpu.idle(conns[0], sim.now)
    assert sim.gpu.sharers() == 2


def test_a_probe_ends_the_turn_and_leaves_the_token_free_for_the_gap() -> None:
    sim = Sim()
    sim.add("a", 50, "share")
    sim.add("b", 50, "share")
    sim.run(1)
    holder = sim.gpu.holder
    assert holder is not None
    before = sim.charged_s("a") + sim.charged_s("b")
    sim.gpu.probe(25 * MS)
    sim.run(0.001)
    assert sim.gpu.holder is None  # revoked and drained at once: the gap has begun
    free_before = sim.held[None]
    sim.run(0.030)
    assert sim.held[None] - free_before == pytest.approx(25, abs=2)
    assert sim.gpu.holder is not None  # and the token goes on after it
    sim.run(1)
    after = sim.charged_s("a") + sim.charged_s("b")
    assert after - before == pytest.approx(1.031 - 0.025, abs=0.01)  # the gap is charged to none
    assert (sim.gpu.probes, sim.gpu.probe_ns) == (1, 25 * MS)  # for the status file
    doc = status.render({"GPU-a": sim.gpu}, {"GPU-a": 1.0}, sim.now, 0, 0)
    assert (doc["gpus"]["GPU-a"]["probes"], doc["gpus"]["GPU-a"]["probe_ms"]) == (1, 25.0)


def test_a_want_says_whether_it_changed_anything() -> None:
    """The arbiter steps the schedule only for what changed it: a WANT it knew is a no-op."""
    sim = Sim()
    gpu = sim.gpu
    gpu.set_limit("a", 50, "share")
    gpu.set_limit("b", 50, "share")
    for conn, container in (("a/0", "a"), ("b/0", "b")):
        gpu.connect(conn, container, 0)
    assert gpu.want("a/0", 0) and gpu.want("b/0", 0)  # first asked
    sim.settle()
    holder, waiter = ("a/0", "b/0") if gpu.holder == "a" else ("b/0", "a/0")
    assert not gpu.want(waiter, 1)  # still waiting
    assert not gpu.want(holder, 1)  # granted and busy already
    gpu.idle(holder, 2)
    assert gpu.want(holder, 3)  # busy again after IDLE
    gpu.spent(holder, gpu.epoch, 0, 4)
    assert gpu.want(holder, 5)  # a spent grant's launcher waits for the next
    assert not gpu.want(holder, 6)


def test_a_probe_asked_for_while_the_holder_drains_waits_for_its_done() -> None:
    """Nothing but the DONE (or the revoke's deadline) ends a drain: a probe asked for then
    gives no deadline at `now` (the arbiter would wake at once, again and again, until the
    DONE came), and the gap starts at the DONE."""
    sim = Sim()
    (a,) = sim.add("a", 50, "share")
    sim.add("b", 50, "share")
    sim.saturating.discard(a)  # a drains until told below
    while not (sim.gpu.holder == "a" and sim.gpu.phase is Phase.REVOKING):
        assert sim.now < SECOND, "a was never revoked"
        sim.run(0.001)
    revoked_at = sim.sent[-1][0]
    sim.gpu.probe(25 * MS)
    assert sim.gpu.next_deadline(sim.now) == revoked_at + sim.gpu.revoke_deadline_ns()
    sim.gpu.done(a, sim.orders_to(a, "revoke")[-1].epoch, sim.now)
    sim.settle()
    assert sim.gpu.holder is None and sim.gpu.next_deadline(sim.now) == sim.now + 25 * MS


def test_a_fixed_holders_grant_admits_no_more_work_than_its_credit() -> None:
    """A container of several busy processes queues what its grant admits; for `fixed` that is
    its credit (at least the 2 quanta a grant admits while others wait), not the 20 quanta a
    `share` container alone gets."""
    sim = Sim()
    sim.add("fixed", 20, "fixed", conns=8)
    sim.settle()
    assert sim.gpu.holder == "fixed"
    assert sim.gpu.grant_work_ns() == 2 * 20 * MS  # its credit (20 ms), at least 2 quanta
    sim.gpu.remove("fixed", sim.now)
    sim.add("share", 20, "share", conns=8)
    sim.settle()
    assert sim.gpu.grant_work_ns() == 20 * 20 * MS  # alone: ALONE_WORK_QUANTA


def test_a_drain_is_charged_for_the_processes_still_draining() -> None:
    """Beside an unlimited process (u*k = 1) a holder of two busy processes is charged 2/3 of
    its turn; after the REVOKE, each process's DONE ends its part: from the first DONE on, the
    one still draining is charged 1/2 (charged 2/3 to the end, `fixed` 20 of 8 processes beside
    4 unlimited ones got 13-16)."""
    gpu: GpuSchedule[str] = GpuSchedule(20 * MS, 1000 * MS, 2 * MS, now=0)
    gpu.set_limit("a", 50, "share")
    gpu.set_limit("b", 50, "share")
    gpu.set_unmanaged(1.0)
    for conn in ("a/0", "a/1"):
        gpu.connect(conn, "a", 0)
        gpu.want(conn, 0)
    gpu.step(0)
    assert gpu.holder == "a"
    gpu.connect("b/0", "b", 1)
    gpu.want("b/0", 1)
    revokes, revoked_at = [], 0
    for t in range(2, 40):
        revokes = [(c, o) for c, o in gpu.step(t * MS) if o.kind == "revoke"]
        if revokes:
            revoked_at = t * MS  # the quantum's end
            break
    assert {c for c, _ in revokes} == {"a/0", "a/1"} and gpu.phase is Phase.REVOKING
    epoch = revokes[0][1].epoch
    gpu.done("a/0", epoch, revoked_at + 1 * MS)
    gpu.step(revoked_at + 1 * MS)
    gpu.done("a/1", epoch, revoked_at + 41 * MS)
    gpu.step(revoked_at + 41 * MS)
    assert gpu.holder == "b"
    charged = gpu.usage(revoked_at + 41 * MS)["a"].charged_ns
    expected = (revoked_at + 1 * MS) * 2 / 3 + 40 * MS / 2
    assert charged == pytest.approx(expected, rel=0.02)


class DeadlineSim(Sim):
    """The same, but stepped only at `next_deadline` (as the arbiter sleeps), never a tick."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.wakeups = 0

    def run(self, seconds: float) -> None:
        end = self.now + round(seconds * SECOND)
        while self.now < end:
            self.settle()
            self.wakeups += 1
            deadline = self.gpu.next_deadline(self.now)
            assert deadline is None or deadline >= self.now
            step_to = end if deadline is None else min(end, max(deadline, self.now + 1))
            self.held[self.gpu.holder] += (step_to - self.now) / MS
            self.now = step_to
        self.settle()


MIXES = {
    "share 30/70": [("a", 30, "share"), ("b", 70, "share")],
    "fixed 30/30": [("a", 30, "fixed"), ("b", 30, "fixed")],
    "fixed 20 + share 40": [("a", 20, "fixed"), ("b", 40, "share")],
    "fixed 60 alone": [("a", 60, "fixed")],
}


@pytest.mark.parametrize("mix", list(MIXES))
def test_stepping_at_the_deadlines_gives_what_a_tick_gives(mix: str) -> None:
    ticked, woken = Sim(), DeadlineSim()
    for sim in (ticked, woken):
        for name, percent, policy in MIXES[mix]:
            sim.add(name, percent, policy, conns=2)
        sim.run(5)
    for name, _, _ in MIXES[mix]:
        assert woken.charged_s(name) == pytest.approx(ticked.charged_s(name), abs=0.05)
    # a wake-up per turn or so, not one a millisecond
    assert woken.wakeups < 5000 / 4


def test_a_quiet_holder_is_released_at_its_deadline() -> None:
    sim = DeadlineSim()
    (a,) = sim.add("a", 50, "share")
    sim.saturating.discard(a)
    sim.settle()
    sim.gpu.idle(a, sim.now)
    idle_at = sim.now
    assert sim.gpu.next_deadline(sim.now) == idle_at + 2 * MS
    sim.run(0.003)
    assert revoke_time(sim, a) == idle_at + 2 * MS
    # it does not answer: the next thing due is the revoke's deadline
    assert sim.gpu.next_deadline(sim.now) == idle_at + 2 * MS + 40 * MS
    sim.gpu.done(a, sim.orders_to(a, "revoke")[0].epoch, sim.now)
    sim.settle()
    assert sim.gpu.holder is None and sim.gpu.next_deadline(sim.now) is None


def test_a_fixed_container_without_credit_is_woken_when_it_has_some() -> None:
    sim = DeadlineSim()
    sim.add("a", 10, "fixed")
    sim.run(2)
    # 10 % of the time, in turns whenever the credit allows: never more, never starved
    assert sim.charged_s("a") == pytest.approx(0.2, abs=0.03)


def test_a_container_of_many_processes_with_long_kernels_takes_turns_a_few_at_a_time() -> None:
    """Each granted process admits at least one launch: 16 processes of 50 ms kernels, all
    granted, queued 800 ms a turn (`fixed` 30 went 1.3 s into debt and had seconds of nothing).
    Once a SPENT shows one connection's grant queues more than a grant's work over them all,
    a turn grants as many as that work holds (one here), the longest waiting first, and a hold
    with nobody else waiting passes on to the next of them as each spends."""
    gpu: GpuSchedule[str] = GpuSchedule(20 * MS, 1000 * MS, 2 * MS, now=0)
    gpu.set_limit("many", 50, "share")
    gpu.set_limit("one", 50, "share")
    many = [f"many/{i}" for i in range(16)]
    for conn in [*many, "one/0"]:
        gpu.connect(conn, conn.split("/")[0], 0)
        gpu.want(conn, 0)
    turns: dict[int, list[str]] = {}  # epoch: the connections of `many` granted in it
    for t in range(0, 3000):
        now = t * MS
        orders = gpu.step(now)
        granted = [(c, o) for c, o in orders if o.kind == "grant" and c.startswith("many")]
        for conn, order in granted:  # each queues one 50 ms kernel at once, beside the others
            turns.setdefault(order.epoch, []).append(conn)
            gpu.spent(conn, order.epoch, 50 * MS * len(granted), now)
            gpu.want(conn, now)
        for conn, order in orders:
            if order.kind == "revoke":
                gpu.done(conn, order.epoch, now)
                gpu.want(conn, now)
        if len(turns) >= 6:
            break
    grants = list(turns.values())
    assert sorted(grants[0]) == sorted(many)  # nothing known yet: every one
    assert all(len(g) == 1 for g in grants[1:]), grants
    assert len({g[0] for g in grants[1:]}) == len(grants) - 1  # a different one each turn
