"""What a container is charged for GPU time, the order containers are served in, and what a
limit may be (`check_limit`).

Pure arithmetic on one `Tenant` (turnstate.py), shared by the schedule's three ways of charging:
a hold (the holder, at f of the GPU), a late drain after a forced revoke, and out-of-turn work
the host saw (`GpuSchedule.charge_outside`). Each moves the same four figures alike: virtual time
(charged ns / weight: `share` and best-effort containers are served by least), a `fixed` one's
credit (down to DEBT_FLOOR_NS), the total charged and the recent charges its share over the last
~1 s is read from.
"""

from __future__ import annotations

from cgpu.core.computestatus import BEST_EFFORT

from .turnstate import NORMAL, PRIORITIES, Conn, Tenant

FIXED, SHARE = "fixed", "share"
POLICIES = (FIXED, SHARE)  # a compute line's policies
BEST_EFFORT_WEIGHT = 100  # a best-effort container's virtual time counts at this percent
DEBT_FLOOR_NS = -2_000_000_000  # a fixed container's credit never goes below -2 s
CREDIT_CAP_NS = 1_000_000_000  # nor above 1 s (a quantum while it wants nothing)
SHARE_WINDOW_NS = 1_000_000_000  # shares are over the last ~1 s
MIN_FRACTION = 0.2  # f is clamped to [0.2, 1]
FULL = 10_000  # a share of 100 %, in 1/100 percent

_POLICY_RANK = {FIXED: 0, SHARE: 1, BEST_EFFORT: 2}


def check_limit(percent: int, policy: str, priority: str = NORMAL) -> None:
    """ValueError unless `percent` is 1-100, `policy` fixed or share and `priority` high,
    normal or low; or, best effort (no limit), `percent` 0."""
    if policy == BEST_EFFORT and percent == 0 and priority in PRIORITIES:
        return
    if isinstance(percent, bool) or not 1 <= percent <= 100:
        raise ValueError(f"compute percent {percent!r}: 1 to 100")
    if policy not in POLICIES:
        raise ValueError(f"compute policy {policy!r}: fixed or share")
    if priority not in PRIORITIES:
        raise ValueError(f"compute priority {priority!r}: high, normal or low")


def rank(tenant: Tenant[Conn]) -> tuple[int, int, int]:
    """Which class a container is served in: its priority (high, normal, low), then 0 for
    `fixed` (a reservation), 1 for `share`, 2 for best effort (no limit: what the others
    leave). A best-effort container below `high` comes after the `low` limited ones too (then
    `normal` before `low`): it gets what every limited container leaves. Ranked at its
    priority, a `normal` one took 70-80 of the GPU from a `low` `share` 70 trainer that got 0."""
    priority = PRIORITIES.index(tenant.priority)
    if tenant.policy == BEST_EFFORT and tenant.priority != PRIORITIES[0]:
        return len(PRIORITIES) - 1, _POLICY_RANK[BEST_EFFORT], priority
    return priority, _POLICY_RANK[tenant.policy], 0


def weight(tenant: Tenant[Conn]) -> int:
    """The percent a container's virtual time counts at (charged ns / weight): its limit, or
    BEST_EFFORT_WEIGHT without one, so that best-effort containers split what is left evenly."""
    return tenant.percent if tenant.policy != BEST_EFFORT else BEST_EFFORT_WEIGHT


def fraction(busy: int, load: float) -> float:
    """f = n / (n + u*k): the part of the GPU a holder of `busy` busy connections had beside
    the unmanaged load, clamped to [MIN_FRACTION, 1]."""
    busy = max(1, busy)
    return min(1.0, max(MIN_FRACTION, busy / (busy + load)))


def charge(tenant: Tenant[Conn], charged: float, since: int, until: int) -> None:
    """Charge `charged` ns of GPU time, used over [since, until], to the container."""
    tenant.vtime += charged / weight(tenant)
    if tenant.policy == FIXED:
        tenant.credit_ns = max(tenant.credit_ns - charged, DEBT_FLOOR_NS)
    tenant.charged_ns += charged
    tenant.recent.append((since, until, charged))


def _after(segment: tuple[int, int, float], start: int) -> float:
    """The part of a charge for [begin, end] that falls after `start` (pro rata)."""
    begin, end, charged = segment
    return charged if begin >= start else charged * max(0, end - start) / (end - begin)


def share(tenant: Tenant[Conn], now: int, pending: float = 0.0) -> int:
    """The container's charge over the last ~1 s (and `pending`, what its current hold would
    be charged), in 1/100 percent of that time; older charges are dropped."""
    start = now - SHARE_WINDOW_NS
    while tenant.recent and tenant.recent[0][1] <= start:
        tenant.recent.popleft()
    charged = sum(_after(segment, start) for segment in tenant.recent) + pending
    return max(0, min(FULL, round(charged * FULL / SHARE_WINDOW_NS)))
