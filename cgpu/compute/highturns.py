"""The turns beside a `high` container: what makes a `high` one preempt a holder, and how a
holder of lower priority is granted so that what must drain when the `high` one comes stays
short (architecture.md, "Priorities"). `GpuSchedule` (schedule.py) keeps the state and the
other rules; these read it.
"""

from __future__ import annotations

from .charging import FIXED
from .tokenview import TokenView
from .turnstate import HIGH, Conn, Tenant, Token

PREEMPTIBLE_WORK_DIVISOR = 20  # beside a `high` container a grant admits 1/20 of a quantum


class HighTurns(TokenView[Conn]):
    """The rules of `high` containers' turns, over the state `GpuSchedule` keeps."""

    quantum_ns: int

    def _eligible(self, tenant: Tenant[Conn]) -> bool:
        raise NotImplementedError  # GpuSchedule's

    def _refill_ns(self, tenant: Tenant[Conn]) -> float:
        raise NotImplementedError  # GpuSchedule's

    def grant_work_ns(self) -> int:
        raise NotImplementedError  # GpuSchedule's

    def _high_busy(self) -> bool:
        """A `high` container has work: it holds the token and is not idle, or it waits with
        credit to spend (one that spent its `fixed` credit blocks nobody: the GPU would idle)."""
        holder = self.holder
        for name, tenant in self._tenants.items():
            if tenant.priority != HIGH:
                continue
            if name == holder:
                if not all(self._links[c].idle for c in tenant.conns):
                    return True
            elif self._eligible(tenant):
                return True
        return False

    def _preempting(self, token: Token) -> bool:
        """Whether a `high` container waits, with credit, while one of lower priority holds."""
        if self._tenants[token.holder].priority == HIGH:
            return False
        return any(
            t.priority == HIGH and self._eligible(t)
            for n, t in self._tenants.items()
            if n != token.holder
        )

    def counted_grants(self) -> bool:
        """Whether the holder's grants must be counted by the shim however many launches they
        admit: near a `high` container's turn (`_near_high`), a grant of many short kernels
        must not become a driver queue that the preempting REVOKE then waits for (the shim
        counts only grants of a few launches otherwise)."""
        holder = self.holder
        tenant = self._tenants.get(holder) if holder else None
        return bool(tenant and self._counts(tenant))

    def _counts(self, tenant: Tenant[Conn]) -> bool:
        """Whether `tenant`'s grants are counted (`counted_grants`): near the turn of a `high`
        `fixed` container whose credit is coming back. Not beside one that may ask at any
        moment (inference with credit, a `share` one): there the shim counts a preemptible
        grant of up to 8 launches as before (kernels of 1/8 ms or more), and shorter kernels
        keep a driver queue, not two messages a millisecond (not measured either way)."""
        if tenant.priority == HIGH:
            return False
        wait = self._high_wait_ns(tenant)
        return wait is not None and wait > 0 and self._near_high(tenant, wait)

    def _near_high(self, tenant: Tenant[Conn], wait: float | None = None) -> bool:
        """Whether a `high` container other than `tenant` could take the GPU within what
        `tenant` takes to drain after a REVOKE (and a renewal's lead): then its grants are
        preemptible ones, counted, renewed as their work runs out. Further off (a `high`
        `fixed` container refilling its credit) it is granted as usual, and REVOKEd once that
        near (`_revoke_reason`, "ahead"): beside a saturating `high` `fixed` 25 container, a
        `low` trainer granted preemptible grants throughout got 15-55 of the 75 left, the GPU
        idle while each renewal went round (2-core host, 500 us kernels)."""
        wait = self._high_wait_ns(tenant) if wait is None else wait
        if wait is None:
            return False
        return wait <= self._near_margin_ns(tenant)

    def _near_margin_ns(self, tenant: Tenant[Conn]) -> float:
        """How near a `high` turn counts as near for `tenant`: its drain after a REVOKE (a
        quantum until one is measured) and a renewal's lead."""
        return (tenant.drain_ns or self.quantum_ns) + self._renewal_lead_ns()

    def _high_wait_ns(self, besides: Tenant[Conn]) -> float | None:
        """How long at least until a `high` container other than `besides` could take the GPU:
        0 when one may ask at any moment; a `fixed` one that spent its credit, the time its
        credit takes to come back (its turns come no sooner); None when no `high` container
        has a connection on this GPU."""
        wait: float | None = None
        for tenant in self._tenants.values():
            if tenant is besides or tenant.priority != HIGH or not tenant.conns:
                continue
            ns = 0.0
            if tenant.policy == FIXED:  # eligible from credit > 0, or refilled (`_eligible`)
                # A refill is a quantum at least; more (`_refill_ns`) only while others want
                # the GPU, which changes with each of the holder's SPENTs and GRANTs: the least
                # of it, so that the wait is never longer than what comes.
                need = self.quantum_ns if tenant.refilling else 1.0
                ns = max(0.0, (need - tenant.credit_ns) * 100 / tenant.percent)
            wait = ns if wait is None else min(wait, ns)
        return wait

    def _near_high_at(self, tenant: Tenant[Conn], now: int) -> float | None:
        """When `_near_high` turns true for `tenant` as a `high` container's credit comes
        back (None: no such time ahead)."""
        wait = self._high_wait_ns(tenant)
        if wait is None:
            return None
        ahead = wait - self._near_margin_ns(tenant)
        return now + ahead if ahead > 0 else None

    def _renewal_lead_ns(self) -> int:
        """How much queued work a holder beside a `high` container may still have when its
        spent grant is renewed: one and a half preemptible grants, so that the renewal's round
        trip (the arbiter's sleep rounds up to a millisecond) finds the GPU still busy."""
        return 3 * self.quantum_ns // PREEMPTIBLE_WORK_DIVISOR // 2

    def _renewal_held(self, token: Token, now: int) -> bool:
        """Whether a spent grant waits for its queued work to run before it is renewed: near a
        `high` container's turn, so that renewals cannot pile work up faster than the GPU runs
        it (what a REVOKE must drain stays about one grant; the shim admits each grant's budget
        whatever is still queued from the last)."""
        tenant = self._tenants[token.holder]
        if tenant.priority == HIGH or not self._near_high(tenant):
            return False
        queued = token.queued_until - now
        return queued > self._renewal_lead_ns() or self._outlasts_wait(tenant, max(0, queued))

    def _outlasts_wait(self, tenant: Tenant[Conn], queued: float = 0.0) -> bool:
        """Whether one more launch of `tenant` (known from its SPENTs to be longer than a
        grant), after `queued`, would still run when a `high` `fixed` container's credit comes
        back: not granted, the GPU idles less than that launch, and the `high` one does not
        start its turn time-sliced against it (`fixed` 25 `high` of 5 ms kernels beside a `low`
        trainer got 12.5-22 with it)."""
        if not tenant.spent_past_grant or tenant.priority == HIGH:
            return False
        wait = self._high_wait_ns(tenant)
        return wait is not None and 0 < wait < queued + tenant.spent_work_ns
