"""One GPU's log of holds: who held the token, from its GRANT to its last DONE.

The NVML thread (sampler.py) reads it to tell which container's work a period's busy time could
be, and the out-of-turn judge what share of each period a container held. A connection that
drains after its hold was forced to end moves that hold's end later.
"""

from __future__ import annotations

from collections import deque

from .turnstate import Hold

HOLD_HISTORY_NS = 5_000_000_000  # how far back the log goes


class HoldLog:
    """The holds that ended within HOLD_HISTORY_NS, oldest first."""

    def __init__(self) -> None:
        self._holds: deque[Hold] = deque()

    def add(self, hold: Hold) -> None:
        """Log a hold that has ended."""
        self._holds.append(hold)

    def extend(self, container: str, since: int, end: int) -> None:
        """The container's latest hold that ended at or after `since` ends at `end` at the
        earliest (a late drain)."""
        for index in range(len(self._holds) - 1, -1, -1):
            hold = self._holds[index]
            if hold.container == container and hold.end >= since:
                self._holds[index] = hold._replace(end=max(hold.end, end))
                return

    def since(self, start: int, now: int, current: Hold | None) -> list[Hold]:
        """The holds that ended at or after `start`, oldest first, then `current` (the hold
        still running, ending at `now`)."""
        while self._holds and self._holds[0].end < now - HOLD_HISTORY_NS:
            self._holds.popleft()
        holds = [hold for hold in self._holds if hold.end >= start]
        if current is not None:
            holds.append(current)
        return holds


def held_ns(holds: list[Hold], start: int, end: int) -> int:
    """How long the holds cover within [start, end] (holds do not overlap)."""
    return sum(max(0, min(end, hold.end) - max(start, hold.start)) for hold in holds)
