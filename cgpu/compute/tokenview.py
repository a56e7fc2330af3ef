"""What one GPU's schedule says of its token, read-only: who holds it, in which phase, what it
owes, and the log of holds (the arbiter's loop, the NVML thread's snapshot and the status file
read these). `GpuSchedule` (schedule.py) keeps the state and changes it.
"""

from __future__ import annotations

from typing import Generic

from .holdlog import HoldLog, held_ns
from .turnstate import Conn, Hold, Link, Phase, Tenant, Token


class TokenView(Generic[Conn]):
    """The read-only side of a GPU's schedule, over the state `GpuSchedule` keeps."""

    _token: Token | None
    _tenants: dict[str, Tenant[Conn]]
    _links: dict[Conn, Link]
    _epoch: int
    _holds: HoldLog

    @property
    def holder(self) -> str | None:
        """The container that holds the token, or None."""
        return self._token.holder if self._token else None

    @property
    def phase(self) -> Phase | None:
        """The holder's phase, or None when the token is free."""
        return self._token.phase if self._token else None

    @property
    def epoch(self) -> int:
        """The epoch of the latest grant (0 before the first)."""
        return self._epoch

    def draining(self) -> list[Conn]:
        """The connections that owe a DONE for the current REVOKE."""
        return [conn for conn, link in self._links.items() if link.owes_done]

    def revoked_at(self) -> int:
        """When the holder was revoked; 0 unless it drains."""
        token = self._token
        return token.t_revoke if token and token.phase is Phase.REVOKING else 0

    def queued_until(self) -> int:
        """When the work the holder said it queued (SPENT) should have run; 0 when the token is
        free (a REVOKE's drain is explained by that work until then)."""
        return self._token.queued_until if self._token else 0

    def quiet(self) -> bool:
        """Nothing can happen without an event: the token is free and nobody wants it."""
        return self._token is None and not any(link.wanting for link in self._links.values())

    def held_ns(self, start: int, end: int, now: int) -> int:
        """How long some container held the token within [start, end]."""
        return held_ns(self.holds_since(start, now), start, end)

    def holds_since(self, start: int, now: int) -> list[Hold]:
        """The holds that ended at or after `start` (the log reaches HOLD_HISTORY_NS back),
        oldest first; the current one last, ending at `now`."""
        token = self._token
        current = None
        if token:
            revoked = token.t_revoke if token.phase is Phase.REVOKING else None
            current = Hold(token.holder, token.t_grant, revoked, now)
        return self._holds.since(start, now, current)

    def _phase_of(self, link: Link) -> Phase | None:
        """The token's phase if the link's container holds it, else None."""
        token = self._token
        return token.phase if token and token.holder == link.container else None

    def _waiting_since(self, tenant: Tenant[Conn]) -> int:
        """When the container's longest-waiting connection started to want."""
        return min(self._links[c].want_since for c in tenant.conns if self._links[c].wanting)
