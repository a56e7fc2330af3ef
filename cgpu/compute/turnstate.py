"""What one GPU's schedule keeps and says: the orders it sends, the figures it reports, the hold
log, and the state of each connection (`Link`), container (`Tenant`) and of the token (`Token`).
`schedule.GpuSchedule` holds and changes them; nothing here has rules.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, Literal, NamedTuple, TypeVar

Conn = TypeVar("Conn", bound=Hashable)

HIGH, NORMAL, LOW = "high", "normal", "low"
PRIORITIES = (HIGH, NORMAL, LOW)  # served in this order (see schedule._rank)


@dataclass(frozen=True)
class Order:
    """A message for one connection: GRANT (with the container's share) or REVOKE of `epoch`."""

    kind: Literal["grant", "revoke"]
    epoch: int
    share: int = 0  # grants: the container's share over the last ~1 s, in 1/100 percent


@dataclass(frozen=True)
class Usage:
    """A container's figures on this GPU, for the status file."""

    percent: int
    policy: str
    share: int  # over the last ~1 s, in 1/100 percent
    charged_ns: int
    forced_revokes: int
    out_of_turn_ns: int = 0  # charged for work the host saw outside its turns
    priority: str = NORMAL


class Hold(NamedTuple):
    """One container's hold of the token: GRANT at `start`, REVOKE at `revoke` (None: never
    revoked, as a hold still running or given up by an idle holder), and `end`, its last
    connection drained (a DONE that came after the hold was forced to end moves it later)."""

    container: str
    start: int
    revoke: int | None
    end: int


class Phase(enum.Enum):
    """What the holder is doing: running, or draining after a REVOKE."""

    GRANTED = "granted"
    REVOKING = "revoking"


@dataclass
class Link:
    """One connection's state on this GPU."""

    container: str
    wanting: bool = False
    want_since: int = 0
    granted: bool = False  # its gate is open (GRANT sent, no DONE for the revoke yet)
    idle: bool = False
    idle_since: int = 0
    active: bool = False  # not IDLE at some time since the holder was last charged
    owes_done: bool = False  # REVOKE sent, DONE not received
    spent: bool = False  # said SPENT for the current grant: its gate is closed, not drained
    late_epoch: int = 0  # its hold was forced to end before it drained: the DONE it still owes
    late_since: int = 0  # when that hold was forced to end


@dataclass
class Tenant(Generic[Conn]):
    """One container's state on this GPU."""

    percent: int
    policy: str
    credit_ns: float  # fixed only: earned at percent of wall time, spent by holding
    priority: str = NORMAL  # high, normal or low: the order of the classes (see _rank)
    vtime: float = 0.0  # charged ns / percent
    refilling: bool = False  # fixed: spent its budget; eligible again at full credit
    spent_work_ns: float = 0.0  # the work its latest SPENT said it queued
    spent_past_grant: bool = False  # and that was more than its grant admitted (a long kernel)
    conn_work_ns: float = 0.0  # that work over the connections then granted: one's grant
    active: bool = False  # eligible or holding at the last step
    next_limit: tuple[int, str] | None = None  # a change that waits for the hold's end
    charged_ns: float = 0.0
    forced_revokes: int = 0
    out_of_turn_ns: float = 0.0
    tail_ns: int = 0  # flagged for out-of-turn work: its holds end this long after its drain
    late_charged_until: int = 0  # its late drains are charged up to here (they overlap)
    drain_ns: float = 0.0  # how long its REVOKEs of uncounted grants took to drain (smoothed)
    recent: deque[tuple[int, int, float]] = field(default_factory=deque)  # (from, to, charged)
    conns: dict[Conn, None] = field(default_factory=dict)  # in connection order


@dataclass
class Token:
    """The token while a container holds it."""

    holder: str
    epoch: int
    t_grant: int
    t_mark: int  # the grant, or the last time the holder was charged
    phase: Phase = Phase.GRANTED
    t_revoke: int = 0
    drained_at: int = 0  # when the last connection that owed DONE stopped owing it
    spent: bool = False  # revoked because a fixed holder's budget was spent
    queued_until: int = 0  # when the work its clients said they queued (SPENT) should end
    preempted: bool = False  # revoked for a `high` waiter: it has a preemptible grant to drain
    budget_ns: int = 0  # the most work a GRANT of this hold admitted (its packet's budget)
    counted: bool = False  # its latest GRANTs asked the shim to count their budget
