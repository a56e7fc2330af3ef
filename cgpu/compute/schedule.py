"""One GPU's token, time-sliced among the containers on it, once one of them has a compute limit.

Pure: no sockets and no clock. Every time is a `now` argument, in ns of one monotonic clock.
Events (`connect`, `want`, `idle`, `busy`, `done`, `stopped`, `gone`) change the state; `step`
applies the rules at `now` and returns the messages to send, as (connection, Order) pairs.

One container at a time holds the token. `share` containers are served by least virtual time
(charged ns / percent), so saturating ones split the GPU by their percents; `fixed` ones also
need credit, which they earn at their percent of wall time, so they get their percent and no
more. A `fixed` container with credit goes before every `share` one: its percent is a
reservation, and the shares split what the reservations leave (by virtual time alone, `fixed` 20
beside `share` 40 got a third of the turns wherever the limited containers together get less
than the GPU, as beside an unlimited one). A container without a limit on a GPU where others
have one is best effort (`BEST_EFFORT`): it comes after every `share` one, so it gets what the
limited ones leave, and best-effort containers split that evenly. A holder is charged its hold
times f, the fraction of the GPU it really had (below 1 when processes outside the managed
containers run on the GPU too). A probe (`probe`) leaves the token free for a while, so that
those processes' demand shows. What a charge moves (virtual time, credit, totals, the recent
share) and the order of the classes are in `charging.py`.

A grant admits about GRANT_WORK_QUANTA quanta of work while others wait (ALONE_WORK_QUANTA
while none does): the client counts its launches at its own learnt time per launch, at least one,
and the one that reaches it says SPENT with the work it estimates it queued. The holder's virtual
time is then judged with that work counted: the turn ends (REVOKE, the work drains) if a waiter
is not ahead, else the grant is renewed. So a turn of kernels longer than a quantum is about one
kernel long, not the several a process queues.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from . import charging
from .charging import CREDIT_CAP_NS, FIXED, check_limit
from .charging import rank as _rank
from .charging import weight as _weight
from .highturns import PREEMPTIBLE_WORK_DIVISOR, HighTurns
from .holdlog import HoldLog
from .turnstate import (
    HIGH,
    LOW,
    NORMAL,
    Conn,
    Hold,
    Link,
    Order,
    Phase,
    Tenant,
    Token,
    Usage,
)

GRANT_WORK_QUANTA = 2  # the work a grant admits while another container waits, in quanta
ALONE_WORK_QUANTA = 20  # and while none does (a renewal then costs two messages, no wait)
REVOKE_DEADLINE_QUANTA = 2  # a holder that has not drained this long after REVOKE loses the token
REFILL_MAX_QUANTA = 4  # a spent `fixed` container waits for at most this much credit


class GpuSchedule(HighTurns[Conn]):
    """The token of one GPU. Times are ns; `now` never goes backwards."""

    def __init__(self, quantum_ns: int, drain_cap_ns: int, idle_release_ns: int, now: int) -> None:
        self.quantum_ns = quantum_ns
        self.drain_cap_ns = drain_cap_ns
        self.idle_release_ns = idle_release_ns
        self._last_step = now
        self._tenants: dict[str, Tenant[Conn]] = {}
        self._links: dict[Conn, Link] = {}
        self._token: Token | None = None
        self._epoch = 0
        self._load = 0.0  # unmanaged demand: u * k
        self._probe_ns = 0  # a probe asked for: the token is to be left free this long
        self._paused_until = 0  # no grant before this (a probe's gap)
        self.probes = 0  # probes made, and the time they left the token free
        self.probe_ns = 0
        self._holds = HoldLog()
        self._outbox: list[tuple[Conn, Order]] = []

    # --- containers ----------------------------------------------------------------------

    def set_limit(self, container: str, percent: int, policy: str, priority: str = NORMAL) -> None:
        """Add a container, or change its limit (a holder's change of percent or policy applies
        from its next charge: the hold's end or the next quantum boundary; of priority, at once)."""
        check_limit(percent, policy, priority)
        tenant = self._tenants.get(container)
        if tenant is None:
            self._tenants[container] = Tenant(percent, policy, self.quantum_ns, priority)
            return
        tenant.priority = priority
        if self.holder == container:
            tenant.next_limit = (percent, policy)
        else:
            tenant.percent, tenant.policy = percent, policy

    def remove(self, container: str, now: int) -> None:
        """Forget a container and its connections; a hold of its ends at `now`."""
        tenant = self._tenants.get(container)
        if tenant is None:
            return
        for conn in list(tenant.conns):
            self.gone(conn, now)
        if self.holder == container:
            self._end_hold(now, forced=False)
        del self._tenants[container]

    @property
    def containers(self) -> list[str]:
        """The containers with a limit on this GPU."""
        return list(self._tenants)

    # --- connection events -----------------------------------------------------------------

    def connect(self, conn: Conn, container: str, now: int) -> None:
        """A process of `container` uses this GPU; it gets a GRANT at once if its container
        holds the token."""
        if conn in self._links:
            raise ValueError(f"connection {conn!r} is already on this GPU")
        tenant = self._tenants[container]
        link = Link(container)
        self._links[conn] = link
        tenant.conns[conn] = None
        token = self._token
        if token and token.holder == container and token.phase is Phase.GRANTED:
            link.granted = link.active = True
            self._outbox.append((conn, Order("grant", token.epoch, self._share(tenant, now))))

    def want(self, conn: Conn, now: int) -> bool:
        """A thread of `conn` waits to launch (from a granted connection: it is busy, unless its
        grant is spent). False when that was known already: nothing changed, and a step would
        do nothing new (the arbiter then does not step for it)."""
        link = self._links.get(conn)
        if link is None:
            return False
        if link.granted and self._phase_of(link) is Phase.GRANTED and not link.spent:
            known = link.active and not link.idle
            link.idle, link.active = False, True
            return not known
        if link.wanting:  # a spent grant's launcher waits for the next one
            return False
        link.wanting, link.want_since = True, now
        return True

    def idle(self, conn: Conn, now: int) -> None:
        """`conn` is granted but has not launched for a while."""
        link = self._links.get(conn)
        if link and link.granted and not link.idle and self._phase_of(link) is Phase.GRANTED:
            link.idle, link.idle_since = True, now

    def busy(self, conn: Conn) -> None:
        """`conn` launches again after IDLE."""
        link = self._links.get(conn)
        if link and link.granted and self._phase_of(link) is Phase.GRANTED:
            link.idle, link.active = False, True

    def done(self, conn: Conn, epoch: int, now: int) -> None:
        """`conn` closed its gate and drained after REVOKE(epoch); other epochs are ignored,
        but for the DONE a connection still owes for a hold that was forced to end."""
        token = self._token
        if token and epoch == token.epoch:
            self._drained(conn, now)
            return
        link = self._links.get(conn)
        if link and link.late_epoch and epoch == link.late_epoch:
            self._late_drained(conn, link, now)

    def spent(self, conn: Conn, epoch: int, work_ns: int, now: int) -> None:
        """`conn` used its grant of `epoch` (its gate is closed) and says it queued `work_ns`
        (clamped to the drain cap: a client's word only moves its own turn)."""
        token = self._token
        link = self._links.get(conn)
        if not (token and link and epoch == token.epoch and link.granted):
            return
        if self._phase_of(link) is not Phase.GRANTED:
            return
        link.spent, link.idle, link.active = True, False, True
        work = min(max(work_ns, 0), self.drain_cap_ns)
        token.queued_until = max(token.queued_until, now) + work
        tenant = self._tenants[link.container]
        tenant.spent_work_ns = work
        # Past what its grant admitted: a kernel longer than the grant (it admits one at least)
        tenant.spent_past_grant = not token.budget_ns or work > token.budget_ns
        # Each granted process's SPENT says what all of them queued at the time per launch it
        # learnt beside the others: one connection's grant is that over how many were granted.
        granted = sum(self._links[c].granted for c in tenant.conns)
        tenant.conn_work_ns = work / max(1, granted)

    def stopped(self, conn: Conn, now: int) -> None:
        """`conn`'s process is stopped or dead: it will launch nothing, count it drained."""
        self._drained(conn, now)
        link = self._links.get(conn)
        if link and link.late_epoch:
            self._late_drained(conn, link, now)

    def gone(self, conn: Conn, now: int) -> None:
        """`conn` disconnected."""
        self.stopped(conn, now)
        link = self._links.pop(conn, None)
        if link is not None:
            self._tenants[link.container].conns.pop(conn, None)

    def probe(self, gap_ns: int) -> None:
        """Leave the GPU to the processes outside the managed containers for `gap_ns`: the
        holder's turn ends now (charged as usual) and the token stays free that long after its
        drain, so the device's busy samples show a period not all held (see unmanaged.py)."""
        self._probe_ns = max(self._probe_ns, gap_ns)

    def charge_outside(self, container: str, ns: int, now: int) -> None:
        """Charge `container` for `ns` of GPU time the host saw it take outside its turns: its
        virtual time, a `fixed` one's credit and its totals, so its neighbours get their share
        back from its later turns."""
        tenant = self._tenants.get(container)
        if tenant is None or ns <= 0:
            return
        charging.charge(tenant, float(ns), now, now)
        tenant.out_of_turn_ns += ns

    def set_tails(self, tails: Mapping[str, int]) -> None:
        """The containers flagged for out-of-turn work (outofturn.py) and each one's tail: its
        holds end that long after its last DONE and the work it said it queued, the token kept
        meanwhile. The arbiter stops a flagged container's processes at its REVOKE; what they
        had queued past the gate (work no SPENT told of) runs in the tail, alone on the GPU and
        charged to it, not time-sliced against the next holder's turn. Others: no tail."""
        for name, tenant in self._tenants.items():
            tenant.tail_ns = max(0, int(tails.get(name, 0)))

    def set_unmanaged(self, load: float) -> None:
        """The unmanaged processes' demand on this GPU, u * k (0: none)."""
        self._load = load if math.isfinite(load) and load > 0 else 0.0

    # --- the rules ---------------------------------------------------------------------------

    def step(self, now: int) -> list[tuple[Conn, Order]]:
        """Apply the rules at `now`; returns the messages to send, in order."""
        now = max(now, self._last_step)
        self._accrue(now)
        self._track_eligibility()
        token = self._token
        if token and token.phase is Phase.GRANTED:
            self._run_hold(token, now)
        if self._probe_ns and token and token.phase is Phase.GRANTED:
            self._revoke(token, now, spent=False)
        if token and token.phase is Phase.REVOKING:
            self._finish_revoke(token, now)
        if self._token is None and self._probe_ns:
            self._paused_until, self._probe_ns = now + self._probe_ns, 0
            self.probes += 1
            self.probe_ns += self._paused_until - now
        if self._token is None and now >= self._paused_until:
            self._grant_next(now)
        out, self._outbox = self._outbox, []
        if self._token and any(order.kind == "grant" for _, order in out):
            self._token.budget_ns = max(self._token.budget_ns, self.grant_work_ns())
            self._token.counted = self.counted_grants()
        return out

    def _accrue(self, now: int) -> None:
        """Fixed containers earn credit at their percent of wall time: up to a quantum while
        idle (idle time is not banked), up to CREDIT_CAP_NS while they want or hold the token
        (waiting for it is not idleness)."""
        elapsed = now - self._last_step
        self._last_step = now
        for name, tenant in self._tenants.items():
            if tenant.policy != FIXED:
                continue
            idle = name != self.holder and not self._wants(tenant)
            cap = self.quantum_ns if idle else max(self.quantum_ns, CREDIT_CAP_NS)
            tenant.credit_ns = min(tenant.credit_ns + tenant.percent / 100 * elapsed, cap)
            if tenant.credit_ns >= self._refill_ns(tenant):
                tenant.refilling = False

    def _refill_ns(self, tenant: Tenant[Conn]) -> float:
        """The credit a `fixed` container that spent its budget waits for: a quantum, or what
        one grant of its queued past the grant's budget (a kernel longer than the grant: it
        admits at least one), at most REFILL_MAX_QUANTA quanta. Back with less, a grant's one
        long kernel put it in debt, and a work-conserving neighbour ran a kernel in each refill:
        `fixed` 60 of 50 ms kernels beside one got 37, `fixed` 20 beside `share` 40 got 9.3.
        Short kernels alone refill a quantum: alone, a grant is the container's credit, and
        refilling to what it queued grew its turns to 100 ms every 0.55 s (1 s windows 12-23
        for 20). Beside a waiter they refill a grant's work, as before: each turn costs the
        holder its processes' wake-up (with quantum refills beside best effort, `fixed` 20 of 8
        processes had a window of 11.9 and 13.3 in two runs; 13.9-15.7 at worst in four without)."""
        work = tenant.spent_work_ns
        if not tenant.spent_past_grant and not self._others_want(tenant):
            work = 0.0
        return min(max(self.quantum_ns, work), REFILL_MAX_QUANTA * self.quantum_ns)

    def _others_want(self, tenant: Tenant[Conn]) -> bool:
        """Some other container waits to launch."""
        return any(self._wants(t) for t in self._tenants.values() if t is not tenant)

    def _wants(self, tenant: Tenant[Conn]) -> bool:
        """Some connection of the container waits to launch."""
        links = self._links
        # A loop, not any() over a generator (2.5 times as fast): called for every tenant,
        # several times at every step.
        for conn in tenant.conns:  # noqa: SIM110
            if links[conn].wanting:
                return True
        return False

    def _eligible(self, tenant: Tenant[Conn]) -> bool:
        """Some connection wants, and (fixed) the container has credit to spend, and (low) no
        `high` container has work."""
        if not self._wants(tenant):
            return False
        if tenant.priority == LOW and self._high_busy():
            return False
        if tenant.spent_past_grant and self._outlasts_wait(tenant):
            return False
        return tenant.policy != FIXED or (tenant.credit_ns > 0 and not tenant.refilling)

    def _track_eligibility(self) -> None:
        """A container that becomes eligible again starts no lower than the least virtual time
        of those already competing (or, when none is, level with the other newcomers), so idle
        time is never banked."""
        holder = self.holder
        active = {n for n, t in self._tenants.items() if n == holder or self._eligible(t)}
        newcomers = [n for n in active if not self._tenants[n].active]
        if newcomers:
            settled = [self._tenants[n].vtime for n in active if self._tenants[n].active]
            floor = min(settled) if settled else max(self._tenants[n].vtime for n in newcomers)
            for name in newcomers:
                self._tenants[name].vtime = max(self._tenants[name].vtime, floor)
        for name, tenant in self._tenants.items():
            tenant.active = name in active

    def _run_hold(self, token: Token, now: int) -> None:
        """Revoke the holder if a rule says so; else charge it at each quantum boundary and
        renew the grants its clients have spent."""
        reason = self._revoke_reason(token, now)
        if reason:
            self._revoke(token, now, spent=reason == "budget")
            token.preempted = reason == "preempt"
            return
        if now - token.t_mark >= self.quantum_ns:
            self._charge(token, now)
        tenant = self._tenants[token.holder]
        links = [self._links[c] for c in tenant.conns]
        waiting = any(self._eligible(t) for n, t in self._tenants.items() if n != token.holder)
        if waiting and not all(link.spent or link.idle for link in links):
            return  # others wait: the holder's turn is judged when every busy grant is spent
        if self._renewal_held(token, now):
            return  # beside a `high` container: renewed once most of what it queued has run
        turn = self._turn_conns(tenant)
        if turn < len(tenant.conns):  # the next of its processes in turn, a few at a time
            self._rotate(tenant, token, turn, now)
            return
        for conn in tenant.conns:
            link = self._links[conn]
            if link.spent:
                link.spent = link.wanting = False
                self._outbox.append((conn, Order("grant", token.epoch, self._share(tenant, now))))

    def _turn_conns(self, tenant: Tenant[Conn]) -> int:
        """How many of a container's connections a turn grants: all of them, unless one
        connection's grant queues more than twice a grant's work over them all (a kernel longer
        than that: a grant admits at least one launch each). Then as many as GRANT_WORK_QUANTA
        quanta hold, at least one: `fixed` 30 of 16 processes of 50 ms kernels, all granted, held
        turns of at least 800 ms, went 1.3 s into debt and had seconds of nothing."""
        count = len(tenant.conns)
        per_turn = GRANT_WORK_QUANTA * self.quantum_ns
        # (twice over, not just over: short kernels' SPENTs say about a grant's work, a little
        # more at times, and two processes of 1 ms kernels would go one at a time for good)
        if count < 2 or count * tenant.conn_work_ns <= 2 * per_turn:
            return count
        return max(1, min(count, int(per_turn // tenant.conn_work_ns)))

    def _in_turn_order(self, tenant: Tenant[Conn]) -> list[Conn]:
        """The container's connections, those waiting longest first, then those not waiting."""
        links = self._links
        return sorted(tenant.conns, key=lambda c: (not links[c].wanting, links[c].want_since))

    def _rotate(self, tenant: Tenant[Conn], token: Token, turn: int, now: int) -> None:
        """Grant the connections waiting longest (a spent one waits as it says WANT again) so
        that `turn` of them have a grant in use. A spent connection keeps its closed gate until
        the REVOKE, which every connection granted in the hold gets."""
        links = self._links
        using = sum(
            links[c].granted and not links[c].spent and not links[c].idle for c in tenant.conns
        )
        for conn in self._in_turn_order(tenant)[: max(0, turn - using)]:
            link = links[conn]
            if not link.wanting or (link.granted and not link.spent):
                break
            link.granted = link.active = True
            link.spent = link.wanting = link.idle = False
            self._outbox.append((conn, Order("grant", token.epoch, self._share(tenant, now))))

    def _revoke_reason(self, token: Token, now: int) -> str | None:
        """Why the holder must give the token back now, or None."""
        tenant = self._tenants[token.holder]
        links = [self._links[c] for c in tenant.conns]
        if not links:
            return "gone"
        spent = any(link.spent for link in links)
        owed = self._pending_charge(token, now) + (self._queued_charge(token, now) if spent else 0)
        used = spent and all(link.spent or link.idle for link in links)  # every busy grant
        if tenant.policy == FIXED and tenant.credit_ns <= owed:
            return "budget"
        if self._preempting(token):  # at once, not at the end of the turn
            return "preempt"
        if not token.counted and self._counts(tenant):
            return "ahead"  # its queue drains before the `high` one's turn; then counted grants
        waiters = [t for n, t in self._tenants.items() if n != token.holder and self._eligible(t)]
        waiting = bool(waiters)
        turn_over = used or now - token.t_grant >= self.quantum_ns
        if waiting and turn_over and self._behind(waiters, token, now):
            return "quantum"
        # A `high` holder that only lower classes want the GPU from (`low` ones blocked) still
        # ends its turn at the quantum: with work it wants again and comes first, and one that
        # stopped without a word (SIGSTOP) is passed over as it fails to drain.
        others = [t for n, t in self._tenants.items() if n != token.holder and self._wants(t)]
        lower = all(_rank(t)[0] > _rank(tenant)[0] for t in waiters)
        over = now - token.t_grant >= self.quantum_ns
        if tenant.priority == HIGH and others and lower and over:
            return "quantum"
        if not all(link.idle for link in links):
            return None
        if waiting:
            return "idle"
        if now - max(link.idle_since for link in links) >= self.idle_release_ns:
            return "release"
        return None

    def _behind(self, waiters: list[Tenant[Conn]], token: Token, now: int) -> bool:
        """Whether some waiter ranks before the holder or with it (fixed before share, then by
        virtual time), counting what the holder has used since its last charge and the work it
        has queued (else the holder would be granted again)."""
        holder = self._tenants[token.holder]
        owed = self._pending_charge(token, now) + self._queued_charge(token, now)
        holder_rank = (_rank(holder), holder.vtime + owed / _weight(holder))
        return min((_rank(t), t.vtime) for t in waiters) <= holder_rank

    def _revoke(self, token: Token, now: int, spent: bool) -> None:
        """Send REVOKE to every granted connection of the holder."""
        token.phase = Phase.REVOKING
        token.t_revoke = token.drained_at = now
        token.spent = spent
        for conn in self._tenants[token.holder].conns:
            link = self._links[conn]
            if link.granted:
                link.owes_done = True
                self._outbox.append((conn, Order("revoke", token.epoch)))

    def revoke_deadline_ns(self, token: Token | None = None) -> int:
        """How long a REVOKE waits for DONE before the token moves on: two quanta, plus the
        work the holder said it queued (SPENT) that had not run at the REVOKE (a 200 ms kernel
        the grant admitted; cut at the grant's budget, `share` 70 of 200 ms kernels got 62.6 in
        a 5 s window); never past the drain cap. A connection that drains later is charged its
        late drain; one that never answers (and never said SPENT) loses the GPU two quanta
        after the REVOKE. A holder revoked for a `high` waiter has a preemptible grant's work
        (1/20 of a quantum)."""
        if token is not None and token.preempted:
            # A `high` waiter: the holder has what one preemptible grant admits to drain; a
            # kernel still running then is time-sliced by the GPU against the high one's work.
            return min(self.drain_cap_ns, self.quantum_ns // PREEMPTIBLE_WORK_DIVISOR)
        wait = REVOKE_DEADLINE_QUANTA * self.quantum_ns
        if token is not None:  # a kernel already running cannot be taken back
            wait += max(0, token.queued_until - token.t_revoke)
        return min(self.drain_cap_ns, wait)

    def _finish_revoke(self, token: Token, now: int) -> None:
        """End the hold once every connection has drained, or force it at the deadline (sooner
        once a `high` container waits for it)."""
        if not token.preempted and self._preempting(token):
            token.preempted = True
        if not self.draining():
            end = self._tail_end(token)
            if now >= end:
                self._end_hold(end, forced=False)
        elif now - token.t_revoke >= self.revoke_deadline_ns(token):
            self._end_hold(now, forced=True)

    def _tail_end(self, token: Token) -> int:
        """When a drained hold ends: at the last DONE, or (a container with a tail, see
        `set_tails`) its tail after that and after the work it said it queued, of which no
        more than a tail is waited for (its processes stopped at the REVOKE, a SPENT's word
        could keep the GPU idle: one that said 100 ms held a period 26% busy)."""
        tail = self._tenants[token.holder].tail_ns
        if not tail or token.preempted:  # a `high` waiter is not kept waiting for it
            return token.drained_at
        queued = min(max(0, token.queued_until - token.drained_at), tail)
        return token.drained_at + queued + tail

    def _end_hold(self, end: int, forced: bool) -> None:
        """Charge the holder up to `end`, log the hold and free the token. Connections that
        still owe DONE are late: each is charged its drain when it answers (or goes)."""
        token = self._token
        assert token is not None
        tenant = self._tenants[token.holder]
        self._charge(token, max(end, token.t_mark))
        revoked = token.t_revoke if token.phase is Phase.REVOKING else None
        self._holds.add(Hold(token.holder, token.t_grant, revoked, end))
        for conn in tenant.conns:
            link = self._links[conn]
            if link.owes_done:
                link.late_epoch, link.late_since = token.epoch, end
            link.granted = link.owes_done = link.idle = link.spent = False
        tenant.forced_revokes += forced
        if revoked is not None and not forced and not token.counted and not token.preempted:
            drain = max(0, token.drained_at - revoked)  # what an uncounted grant leaves queued
            tenant.drain_ns = drain if not tenant.drain_ns else (3 * tenant.drain_ns + drain) / 4
        tenant.refilling = tenant.refilling or (token.spent and tenant.policy == FIXED)
        self._token = None

    def _grant_next(self, now: int) -> None:
        """Give the free token to the eligible container that ranks first (fixed before share,
        then the least virtual time; ties: the one waiting longest), and GRANT all of its
        connections."""
        candidates = [
            (_rank(tenant), tenant.vtime, self._waiting_since(tenant), name)
            for name, tenant in self._tenants.items()
            if self._eligible(tenant)
        ]
        if not candidates:
            return
        name = min(candidates)[3]
        tenant = self._tenants[name]
        self._epoch += 1
        self._token = Token(name, self._epoch, t_grant=now, t_mark=now)
        share = self._share(tenant, now)
        turn = self._turn_conns(tenant)
        chosen = set(self._in_turn_order(tenant)[:turn]) if turn < len(tenant.conns) else None
        for conn in tenant.conns:
            link = self._links[conn]
            if link.late_epoch:  # its own turn again: what it still ran is charged up to here
                self._late_drained(conn, link, now)
            if chosen is not None and conn not in chosen:
                continue  # waits for a later turn (or its turn within this hold)
            link.granted = link.active = True
            link.wanting = link.idle = False
            self._outbox.append((conn, Order("grant", self._epoch, share)))

    # --- charging ----------------------------------------------------------------------------

    def _fraction(self, token: Token) -> float:
        """f = n / (n + u*k): the holder's n busy connections against the unmanaged load (while
        it drains after a REVOKE, those that have not drained: each is charged at its DONE)."""
        links = [self._links[c] for c in self._tenants[token.holder].conns]
        draining = token.phase is Phase.REVOKING
        busy = sum(link.owes_done if draining else link.active for link in links)
        # A container still draining a hold that was forced to end is not counted: it may run
        # nothing (a connection that never answers), and a neighbour charged less for it would
        # take a third container's turns. Its late work is its own charge when it answers.
        return charging.fraction(busy, self._load)

    def _late_containers(self, besides: str) -> int:
        """How many other containers still drain a hold that was forced to end, each counted
        for no longer than a drain can last (a connection that never answers is not a load)."""
        now = self._last_step
        return len(
            {
                link.container
                for link in self._links.values()
                if link.late_epoch
                and link.container != besides
                and now - link.late_since < self.drain_cap_ns
            }
        )

    def _pending_charge(self, token: Token, now: int) -> float:
        """What the holder would be charged for its hold since the last charge."""
        return (now - token.t_mark) * self._fraction(token)

    def _queued_charge(self, token: Token, now: int) -> float:
        """What the holder would be charged for the work it said it queued that has not run."""
        return max(0, token.queued_until - now) * self._fraction(token)

    def _charge(self, token: Token, now: int) -> None:
        """Charge the holder for [t_mark, now]: virtual time, credit, totals."""
        tenant = self._tenants[token.holder]
        charging.charge(tenant, self._pending_charge(token, now), token.t_mark, now)
        token.t_mark = now
        if tenant.next_limit:  # a change made during the hold applies from here on
            (tenant.percent, tenant.policy), tenant.next_limit = tenant.next_limit, None
        for conn in tenant.conns:
            link = self._links[conn]
            link.active = link.granted and not link.idle

    # --- queries -----------------------------------------------------------------------------

    def grant_work_ns(self) -> int:
        """The work a grant admits now: GRANT_WORK_QUANTA quanta while another container is
        eligible (shorter kernels: the quantum rules), ALONE_WORK_QUANTA while none is; for a
        `fixed` holder no more than its credit (at least GRANT_WORK_QUANTA quanta). A container
        of several busy processes queues what its grant admits whatever the REVOKE: `fixed` 20
        of 8 processes alone, admitted 20 quanta, held turns of 110 ms every 0.57 s (12-22 per
        1 s window)."""
        holder = self.holder
        # Wanting, not only eligible: a `fixed` container refilling its credit will be
        # eligible within its refill, and a grant of ALONE_WORK_QUANTA of long kernels would
        # then drain past the revoke's deadline, time-sliced against it (`fixed` 60 of 50 ms
        # kernels beside a best-effort container got 33).
        waiting = any(self._wants(t) for n, t in self._tenants.items() if n != holder)
        work = (GRANT_WORK_QUANTA if waiting else ALONE_WORK_QUANTA) * self.quantum_ns
        tenant = self._tenants.get(holder) if holder else None
        if tenant and tenant.policy == FIXED:
            work = min(work, max(GRANT_WORK_QUANTA * self.quantum_ns, int(tenant.credit_ns)))
        if tenant and tenant.priority != HIGH and self._near_high(tenant):
            # A `high` container may take the GPU soon: keep what must drain before it short.
            work = min(work, self.quantum_ns // PREEMPTIBLE_WORK_DIVISOR)
        return work

    def sharers(self) -> int:
        """How many busy processes (connections) the holder has: with several, each counts a
        grant's work budget whatever its kernels' length (each has its own queue to drain)."""
        if self._token is None:
            return 1
        links = [self._links[c] for c in self._tenants[self._token.holder].conns]
        return max(1, sum(link.active and not link.idle for link in links))

    def next_deadline(self, now: int) -> int | None:
        """The earliest time after `now` at which `step` may act though no event comes (a
        quantum ends, an idle holder's release, a revoke's deadline, a `fixed` container's
        credit, a probe's gap), or None when only an event can change anything. Called after
        `step(now)`; the arbiter sleeps until then."""
        token = self._token
        if self._probe_ns and (token is None or token.phase is Phase.GRANTED):
            return now  # a probe asked for: `step` revokes, or leaves the token free, now
        # (while the holder drains, a probe waits for its DONE or the revoke's deadline)
        times: list[float] = []
        holder = token.holder if token else None
        if self._paused_until > now:
            times.append(self._paused_until)
        for name, tenant in self._tenants.items():
            if tenant.policy == FIXED and name != holder and self._wants(tenant):
                need = self._refill_ns(tenant) if tenant.refilling else 1.0
                if tenant.credit_ns < need:
                    times.append(now + (need - tenant.credit_ns) * 100 / tenant.percent)
            if name != holder and tenant.spent_past_grant and self._wants(tenant):
                wait = self._high_wait_ns(tenant)  # held back by `_outlasts_wait` until then
                if wait:
                    times.append(now + wait)
        if token and token.phase is Phase.REVOKING:
            times.append(token.t_revoke + self.revoke_deadline_ns(token))
            if not self.draining():
                times.append(self._tail_end(token))
        elif token:
            times += self._hold_deadlines(token, now)
        later = [t for t in times if t > now]  # what is due at `now` was done by `step`
        return math.ceil(min(later)) if later else None

    def _hold_deadlines(self, token: Token, now: int) -> list[float]:
        """When a rule of `_revoke_reason` may end the current hold, or its charge is due."""
        tenant = self._tenants[token.holder]
        links = [self._links[c] for c in tenant.conns]
        times: list[float] = [token.t_mark + self.quantum_ns, token.t_grant + self.quantum_ns]
        if token.queued_until > now:
            times.append(token.queued_until)
            if any(link.spent for link in links) and self._renewal_held(token, now):
                times.append(token.queued_until - self._renewal_lead_ns())
        if links and all(link.idle for link in links):
            times.append(max(link.idle_since for link in links) + self.idle_release_ns)
        if not token.counted and tenant.priority != HIGH:
            near = self._near_high_at(tenant, now)
            if near is not None:  # "ahead" from then
                times.append(near)
        f = self._fraction(token)
        owed = self._pending_charge(token, now) + self._queued_charge(token, now)
        if tenant.policy == FIXED:
            gap, rate = tenant.credit_ns - owed, f - tenant.percent / 100
            if rate > 0:  # the credit earned while holding does not keep up with the charge
                times.append(now + max(0.0, gap) / rate)
        waiters = [t for n, t in self._tenants.items() if n != token.holder and self._eligible(t)]
        level = [t.vtime for t in waiters if _rank(t) == _rank(tenant)]
        if level:  # when the holder's virtual time reaches the least waiter's
            lead = (min(level) - tenant.vtime) * _weight(tenant) - owed
            times.append(now + max(0.0, lead) / f)
        return times

    def usage(self, now: int) -> dict[str, Usage]:
        """Each container's limit, share over the last ~1 s, total charge and forced revokes."""
        return {
            name: Usage(
                t.percent,
                t.policy,
                self._share(t, now),
                int(t.charged_ns),
                t.forced_revokes,
                int(t.out_of_turn_ns),
                t.priority,
            )
            for name, t in self._tenants.items()
        }

    def _share(self, tenant: Tenant[Conn], now: int) -> int:
        """The container's charged time over the last ~1 s, in 1/100 percent."""
        token = self._token
        holding = token and tenant is self._tenants.get(token.holder)
        return charging.share(tenant, now, self._pending_charge(token, now) if holding else 0.0)

    def _drained(self, conn: Conn, now: int) -> None:
        """`conn` no longer owes a DONE."""
        link = self._links.get(conn)
        token = self._token
        if link and link.owes_done and token:
            if self._load and token.phase is Phase.REVOKING and now > token.t_mark:
                # Charge the drain so far with this connection still busy: a container of
                # several processes drains at several instants, and beside processes outside
                # the containers its share of the GPU falls as each one's queue empties
                # (charged as if all stayed busy, fixed 20 of 8 processes beside 4 got 13-16).
                self._charge(token, now)
            link.owes_done = link.granted = False
            token.drained_at = max(token.drained_at, now)

    def _late_drained(self, conn: Conn, link: Link, now: int) -> None:
        """A connection drained (or went) after its hold was forced to end: its container is
        charged the late drain at its part of the GPU beside whoever ran meanwhile, and its
        hold in the log ends here. Its connections drain at once, side by side: each charges
        only the time past what its container's late drains charged already (16 processes of
        50 ms kernels were charged 4.2 s for one forced revoke, and had nothing for 6 s)."""
        container, since = link.container, link.late_since
        link.late_epoch = link.late_since = 0
        tenant = self._tenants.get(container)
        if tenant is None or now <= since:
            return
        start = max(since, tenant.late_charged_until)
        tenant.late_charged_until = max(tenant.late_charged_until, now)
        others = self._load + self._late_containers(container)
        token = self._token
        if token and token.holder != container:
            others += sum(self._links[c].active for c in self._tenants[token.holder].conns)
        # A drain lasts no longer than the drain cap: what a silent connection did after that
        # is for the host's view of out-of-turn work to find.
        charged = max(0, min(now, since + self.drain_cap_ns) - start) / (1 + others)
        if charged > 0:
            charging.charge(tenant, charged, start, now)
        self._holds.extend(container, since, now)
