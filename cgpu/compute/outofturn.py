"""Out-of-turn work, judged from NVML's samples against the arbiter's hold log.

Pure: no NVML, no clock. One `Judge` per GPU is fed the sample periods NVML has closed, each with
the device's busy fraction and the fraction it named per container (the sum over the container's
processes), and the holds of that time (`turnstate.Hold`, in the arbiter's clock).

A container that follows the protocol runs kernels only while it holds the token (from its GRANT
to its last DONE: its hand-over after a REVOKE is inside the hold). A real H100/H200 names one
process per period when several ran (with the whole device's busy percent) and whole percent
otherwise, the process drawn as the one running at a sampling instant: so what is named for such
a container in a period, x, has a mean of at most h, the share of the period it held (the period
widened by `tolerance_ns` at each end, for where the driver's period boundaries and the hold
log's clock disagree), whatever happened before.

**A sequential test.** For any bet 0 <= lam < 1/h, 1 + lam (x - h) then has a mean of at most 1,
so the product over periods is a test supermartingale for a follower, and the CUSUM of its
logarithm, W = max(0, W + log(1 + lam (x - h))), reaches A at most once in about e^A periods
(Lorden's bound; no assumption on how x is spread, nor on the periods being independent). The
bet lam = r / max(h, H_MIN) is the likelihood ratio of "its processes also run r of the time it
does not hold" against "named as often as it holds": a period it held little of and was named in
weighs much (h = 0.05, r = 1/2: +2.4), one it held half of little (+0.4), a period it was not
named in costs log(1 - r). Bets r in BETS run side by side, each against A = FLAG_AT (a blatant
offender is caught by the large bet in a few periods, a mild one by the small bet in tens of
seconds). A follower that uses every hold whole is the worst case; beside processes outside the
containers (which share its turns) its x falls well below h.

**Confirmation.** A period the containers held only part of (a probe, asked for by the sampler
while some container is a suspect, W >= SUSPECT_AT) shows, in the device's own busy fraction,
whether anything ran while nobody held: when every process on the GPU is placed in one of its
containers (`Period.placed`), busy time past the held time by more than the boundary slack
(2 tolerance) is out-of-turn work, measured and not drawn. Within CONFIRM_NS of such a period (or
pair of periods: a probe's gap may straddle their boundary) the suspect with the largest W is
flagged from W >= CONFIRMED_AT (no container flagged on the GPU, which would explain it; a flag
uses the confirmation up). A follower's W reaches CONFIRMED_AT at most once in about
e^CONFIRMED_AT periods, and it matters only while another container runs out of turn unflagged.

Once flagged, a container stays flagged until `clear` (the arbiter clears it when none of its
processes is left on the GPU). While flagged, its excess (x - h) * period, summed, is charged as
out-of-turn time whenever it is positive; the excess of the periods before the flag (the last
MAX_SEEN) is charged at once. A container that was not flagged is never charged: single periods
in which x exceeds h are the sampling's noise.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .turnstate import Hold

BETS = (0.15, 0.4, 0.8)  # r: the share of others' time an offender is assumed to take
H_MIN = 0.02  # h below this is bet on as this (a bet of r / h_min at most)
FLAG_AT = 13.0  # W for a flag on its own (a follower: once in e^13/3 periods, 7 h, at worst)
SUSPECT_AT = 3.5  # W from which the sampler asks for a probe
CONFIRMED_AT = 4.0  # W for a flag within CONFIRM_NS of a period that showed out-of-turn work
CONFIRM_NS = 3_000_000_000
CONFIRM_MARGIN = 0.04  # busy past the held share and the boundary slack, for a confirmation
MIN_FREE = 0.15  # a period with less free time (nobody held) than this confirms nothing
MAX_SEEN = 60  # periods kept per container (10 s at 1/6 s): host_percent, the first charge
TOLERANCE_NS = 10_000_000  # a period is widened by this at each end
HOST_WINDOW_NS = 10_000_000_000  # host_percent is over the last 10 s


@dataclass(frozen=True)
class Period:
    """One closed NVML sample period, in the arbiter's clock."""

    start: int
    end: int
    busy: float  # the device's busy fraction
    named: Mapping[str, float]  # container -> what NVML named for its processes, a fraction
    placed: bool = False  # every process on the GPU was placed in one of its containers


@dataclass
class _Record:
    """One container's history on one GPU."""

    seen: deque[tuple[int, int, float, float]] = field(default_factory=deque)  # end, len, x, h
    w: list[float] = field(default_factory=lambda: [0.0] * len(BETS))
    flagged: bool = False
    flagged_at: int | None = None
    owed: float = 0.0  # excess ns not charged yet (while flagged)
    charged_ns: int = 0

    @property
    def score(self) -> float:
        return max(self.w)


@dataclass(frozen=True)
class Verdict:
    """What the host sees of one container on one GPU."""

    host_percent: float  # share of the GPU's time named for it over the last 10 s
    flagged: bool
    flagged_at: int | None  # the end of the period that tripped it (arbiter ns)
    charged_ns: int  # out-of-turn time charged so far


def held_share(holds: Iterable[Hold], container: str | None, start: int, end: int) -> float:
    """The share of [start, end) that `container` held (its holds merged; None: any container),
    in [0, 1]."""
    spans = sorted(
        (max(h.start, start), min(h.end, end))
        for h in holds
        if container is None or h.container == container
    )
    covered, reach = 0, start
    for a, b in spans:
        a = max(a, reach)
        if b > a:
            covered += b - a
            reach = b
    return min(1.0, covered / (end - start)) if end > start else 0.0


def step(w: Sequence[float], x: float, h: float) -> list[float]:
    """The CUSUMs after one period in which `x` was named for a container that held `h`."""
    h = min(max(h, H_MIN), 1.0)
    out = []
    for r, wi in zip(BETS, w, strict=True):
        bet = min(r / h, (1 - 1e-9) / h)
        out.append(max(0.0, wi + math.log1p(bet * (min(max(x, 0.0), 1.0) - h))))
    return out


@dataclass(frozen=True)
class _Free:
    """A period's device time as the confirmation weighs it (shares of the period)."""

    end: int
    length: int
    free: float  # nobody held
    unexplained: float  # busy past what was held (negative: less busy than held)


def free_time(period: Period, holds: Sequence[Hold]) -> _Free | None:
    """The period's free and unexplained busy time; None when a process outside the
    containers was on the GPU (it would explain the busy time)."""
    if not period.placed:
        return None
    held = held_share(holds, None, period.start, period.end)
    length = period.end - period.start
    return _Free(period.end, length, 1.0 - held, period.busy - held)


def out_of_turn_shown(now: _Free, before: _Free | None, slack_ns: int) -> bool:
    """Whether the device's busy time shows work while nobody held (see Confirmation): in this
    period, or in it and the one before together (a probe's gap may straddle their boundary;
    the split of the time between the two cancels out, the outer ends' slack stays)."""
    spans = [(now,)]
    if before is not None and before.end == now.end - now.length:
        spans.append((before, now))
    for span in spans:  # in ns, the thresholds in shares of one period
        free = sum(p.free * p.length for p in span)
        unexplained = sum(p.unexplained * p.length for p in span)
        if free >= MIN_FREE * now.length and unexplained > slack_ns + CONFIRM_MARGIN * now.length:
            return True
    return False


class Judge:
    """Out-of-turn work on one GPU."""

    def __init__(self, tolerance_ns: int = TOLERANCE_NS) -> None:
        self.tolerance_ns = tolerance_ns
        self._records: dict[str, _Record] = {}
        self._last: _Free | None = None  # the period before, for the confirmation
        self.confirmed_at: int | None = None  # the end of the last period that showed it

    def add(
        self,
        period: Period,
        holds: Sequence[Hold],
        containers: Iterable[str],
        confirm: bool = True,
    ) -> dict[str, int]:
        """Judge one period for the `containers` (every container with a limit on the GPU, or
        some of them: a period may be judged for each container once its holds are final);
        `confirm`: look at the period for a confirmation (once, with every hold final). Returns
        the out-of-turn ns to charge now, per container."""
        length = period.end - period.start
        if length <= 0:
            return {}
        if confirm:
            free = free_time(period, holds)
            if free is not None and out_of_turn_shown(free, self._last, 2 * self.tolerance_ns):
                self.confirmed_at = period.end
            self._last = free
        wide = (period.start - self.tolerance_ns, period.end + self.tolerance_ns)
        records: dict[str, tuple[_Record, float, float]] = {}
        for name in containers:
            record = self._records.setdefault(name, _Record())
            x = min(1.0, max(0.0, period.named.get(name, 0.0)))
            h = min(1.0, held_share(holds, name, *wide) * (wide[1] - wide[0]) / length)
            record.seen.append((period.end, length, x, h))
            while len(record.seen) > MAX_SEEN:
                record.seen.popleft()
            record.w = step(record.w, x, h)
            records[name] = (record, x, h)
        for name in self._tripped(records, period.end):
            record = self._records[name]
            record.flagged, record.flagged_at = True, period.end
            self.confirmed_at = None  # explained by this one: it settles no other suspect
            record.owed = max(0.0, sum((xi - hi) * li for _, li, xi, hi in record.seen))
            record.owed -= (records[name][1] - records[name][2]) * length  # added below
        charges: dict[str, int] = {}
        for name, (record, x, h) in records.items():
            if not record.flagged:
                continue
            record.owed += (x - h) * length
            if record.owed >= 1:
                ns = int(record.owed)
                record.owed -= ns
                record.charged_ns += ns
                charges[name] = ns
        return charges

    def _tripped(self, records: Mapping[str, tuple[_Record, float, float]], end: int) -> list[str]:
        """The containers flagged by this period: W past FLAG_AT, or, within CONFIRM_NS of a
        confirmation and with nobody flagged, the suspect with the largest W if past
        CONFIRMED_AT."""
        fresh = {name: r for name, (r, _, _) in records.items() if not r.flagged}
        tripped = [name for name, r in fresh.items() if r.score >= FLAG_AT]
        confirmed = (
            self.confirmed_at is not None
            and end - self.confirmed_at <= CONFIRM_NS
            and not self.flagged()
        )
        if confirmed and fresh and not tripped:
            top = max(fresh, key=lambda name: fresh[name].score)
            if fresh[top].score >= CONFIRMED_AT:
                tripped.append(top)
        return tripped

    def suspects(self) -> set[str]:
        """Containers not flagged whose W is past SUSPECT_AT (a probe would settle them)."""
        return {
            name
            for name, record in self._records.items()
            if not record.flagged and record.score >= SUSPECT_AT
        }

    def top_suspect(self) -> float:
        """The largest W of the containers not flagged (0 for none)."""
        return max((r.score for r in self._records.values() if not r.flagged), default=0.0)

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
