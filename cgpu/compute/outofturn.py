"""Out-of-turn work, judged from NVML's samples against the arbiter's hold log.

Pure: no NVML, no clock. One `Judge` per GPU is fed the sample periods NVML has closed, each with
the device's busy fraction and the fraction it named per container (the sum over the container's
processes), and the holds of that time (`schedule.Hold`, in the arbiter's clock).

A container that follows the protocol runs kernels only while it holds the token (from its GRANT
to its last DONE: its hand-over after a REVOKE is inside the hold). A real H100/H200 names one
process per period when several ran (with the whole device's busy percent) and whole percent
otherwise, with the process drawn as the one running at a sampling instant: so what is named for
a container in a period, x, has an expectation of its busy share of the period, which for such a
container is at most h, the share of the period it held (the period widened by `tolerance_ns`
at each end, for where the driver's period boundaries and the hold log's clock disagree). Over n
periods, D = sum(x - h) then has a mean of at most 0 and, x lying in [0, 1] with a mean at most
h, a variance of at most V = sum(min(h, 1/4) + VAR_FLOOR). A container is flagged when, for a
window of the last n periods (n in WINDOWS), D > Z * sqrt(V) + MARGIN * n.

The statistic is one bit a period (who was named), so speed and false alarms trade. With Z =
3.5, on periods sampled as an H100 does (tests/compute/test_outofturn.py): two containers that
take turns 50/50 and use every hold whole, the worst case, were flagged once in 320 container-
minutes (none when they use 95% of their holds); beside processes outside the containers, which
share their turns, their x falls well below h. A container that runs 84% of the device on 30% of
the turns was flagged in 1.8-2.3 s (4.5 s at the worst of 20 draws).

Once flagged, a container stays flagged until `clear` (the arbiter clears it when none of its
processes is left on the GPU). While flagged, its excess (x - h) * period, summed, is charged as
out-of-turn time whenever it is positive; the excess of the periods that tripped the flag is
charged at once. A container
that was not flagged is never charged: single periods in which x exceeds h are the sampling's
noise.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .turnstate import Hold

WINDOWS = (3, 6, 9, 12, 15, 18, 24, 30, 45, 60)  # periods (0.5 to 10 s at 1/6 s)
Z = 3.5
MARGIN = 0.02  # per period, for rounding to whole percent
VAR_FLOOR = 0.05  # per period: a misplaced boundary, a driver's late sample
TOLERANCE_NS = 10_000_000  # a period is widened by this at each end
HOST_WINDOW_NS = 10_000_000_000  # host_percent is over the last 10 s


@dataclass(frozen=True)
class Period:
    """One closed NVML sample period, in the arbiter's clock."""

    start: int
    end: int
    busy: float  # the device's busy fraction
    named: Mapping[str, float]  # container -> what NVML named for its processes, a fraction


@dataclass
class _Record:
    """One container's history on one GPU."""

    seen: deque[tuple[int, int, float, float]] = field(default_factory=deque)  # end, len, x, h
    flagged: bool = False
    flagged_at: int | None = None
    owed: float = 0.0  # excess ns not charged yet (while flagged)
    charged_ns: int = 0


@dataclass(frozen=True)
class Verdict:
    """What the host sees of one container on one GPU."""

    host_percent: float  # share of the GPU's time named for it over the last 10 s
    flagged: bool
    flagged_at: int | None  # the end of the period that tripped it (arbiter ns)
    charged_ns: int  # out-of-turn time charged so far


def held_share(holds: Iterable[Hold], container: str, start: int, end: int) -> float:
    """The share of [start, end) that `container` held (its holds merged), in [0, 1]."""
    spans = sorted(
        (max(h.start, start), min(h.end, end)) for h in holds if h.container == container
    )
    covered, reach = 0, start
    for a, b in spans:
        a = max(a, reach)
        if b > a:
            covered += b - a
            reach = b
    return min(1.0, covered / (end - start)) if end > start else 0.0


def trips(seen: Sequence[tuple[int, int, float, float]]) -> bool:
    """Whether some window of the newest periods shows more than the holds explain."""
    d = v = 0.0
    windows = iter(WINDOWS)
    target = next(windows)
    for n, (_, _, x, h) in enumerate(reversed(seen), 1):
        d += x - h
        v += min(h, 0.25) + VAR_FLOOR
        if n == target:
            if d > Z * math.sqrt(v) + MARGIN * n:
                return True
            target = next(windows, 0)
            if not target:
                return False
    return False


class Judge:
    """Out-of-turn work on one GPU."""

    def __init__(self, tolerance_ns: int = TOLERANCE_NS) -> None:
        self.tolerance_ns = tolerance_ns
        self._records: dict[str, _Record] = {}

    def add(
        self, period: Period, holds: Sequence[Hold], containers: Iterable[str]
    ) -> dict[str, int]:
        """Judge one period for every container with a limit on the GPU; returns the
        out-of-turn ns to charge now, per container."""
        length = period.end - period.start
        if length <= 0:
            return {}
        wide = (period.start - self.tolerance_ns, period.end + self.tolerance_ns)
        charges: dict[str, int] = {}
        for name in containers:
            record = self._records.setdefault(name, _Record())
            x = min(1.0, max(0.0, period.named.get(name, 0.0)))
            h = min(1.0, held_share(holds, name, *wide) * (wide[1] - wide[0]) / length)
            record.seen.append((period.end, length, x, h))
            while len(record.seen) > WINDOWS[-1]:
                record.seen.popleft()
            if not record.flagged and trips(record.seen):
                record.flagged, record.flagged_at = True, period.end
                record.owed = max(0.0, sum((xi - hi) * li for _, li, xi, hi in record.seen))
            elif record.flagged:
                record.owed += (x - h) * length
            if record.flagged and record.owed >= 1:
                ns = int(record.owed)
                record.owed -= ns
                record.charged_ns += ns
                charges[name] = ns
        return charges

    def verdict(self, container: str, now: int) -> Verdict:
        """The container's figures as of `now` (arbiter ns)."""
        record = self._records.get(container)
        if record is None:
            return Verdict(0.0, False, None, 0)
        since = now - HOST_WINDOW_NS
        named = sum(x * length for end, length, x, _ in record.seen if end > since)
        span = sum(length for end, length, _, _ in record.seen if end > since)
        percent = round(100.0 * named / span, 1) if span else 0.0
        return Verdict(percent, record.flagged, record.flagged_at, record.charged_ns)

    def flagged(self) -> set[str]:
        """The containers flagged on this GPU."""
        return {name for name, record in self._records.items() if record.flagged}

    def clear(self, container: str) -> None:
        """Forget a container's flag and history (its processes are gone)."""
        self._records.pop(container, None)

    def retain(self, containers: Iterable[str]) -> None:
        """Forget the containers that no longer have a limit on this GPU."""
        keep = set(containers)
        for name in [n for n in self._records if n not in keep]:
            del self._records[name]
