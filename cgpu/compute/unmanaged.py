"""How much of a GPU processes outside the managed containers take: the load behind f.

Per GPU, every ~100 ms: k = the compute processes NVML lists on it that are no managed
connection's peer; u = their demand in [0, 1], from the device's busy samples. A sample covers a
period P (the spacing of the samples) and says how busy the GPU was in it; h is how long a
managed container held the token in that period. The busy time no hold explains, over the time
not held, is u_p = max(0, busy*P - b*h) / (P - h), clamped to [0, 1]; u smooths u_p over about
0.3 s of time not held (a period counts for its free time P - h: a neighbour that idles is
forgotten within about two periods where the token is often free; 1 s of wall time before, and
`fixed` 25 beside it got 42.8 and 31.2 in the two windows after).
b is how busy the GPU is while held (1 at first): a period held for more than 90% of it says
next to nothing of the others (the GPU is busy through a hold whoever runs), so it only teaches
b (below 1 where the GPU time-slices the holder and a neighbour: each context switch idles it).
Counted as demand 0, such periods pulled u down on turns longer than a period, and the holder
was charged too much of the GPU (fixed 30 beside a saturating neighbour got 25). The scheduler
gets u * k (0 when k is 0). A neighbour that appears (k was 0) is taken to saturate the GPU
(u = 1) until a period after the one it was seen in (that one holds time before it ran) says
otherwise: a limited container beside it is not under-served while u is learnt.
Without NVML, or when it fails, the load is 0 (f = 1), logged once.

Probes. While limited containers keep the token held through every period, no period teaches
u, and a neighbour that was idle when u was last learnt and saturates now goes unseen (on an
H200: `fixed` 20 beside `share` 40 and an unlimited container that had idled at first got 9.4,
charged as if it had the whole GPU). So when a GPU has processes outside the containers and no
period has taught u for max(1 s, 6 periods), the scheduler is asked to leave the token free for
a quarter of a period (42 ms a second at 1/6 s: the neighbours fill it, or the GPU idles 4% of
its time); a neighbour that appears is probed two periods after it was seen. A period's weight
in the smoothing is at least the time since the last period that taught u, so a probe's period,
after a second of none, sets u alone; so does the first period that teaches u after a neighbour came
(it replaces the guess u = 1).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, Protocol

log = logging.getLogger(__name__)

SMOOTHING_NS = 1_000_000_000  # how busy a hold keeps the GPU (b) is smoothed over ~1 s
DEMAND_SMOOTHING_NS = 300_000_000  # u over ~0.3 s of free (not held) time
MIN_FREE_SHARE = 0.1  # a period with less than this share not held is skipped
DEFAULT_PERIOD_NS = 166_666_667  # NVML's sample period until the samples show theirs
PROBE_EVERY_NS = 1_000_000_000  # a probe when no period has taught u for this long
PROBE_EVERY_PERIODS = 6  # or for this many periods, if longer
PROBE_GAP_SHARE = 0.25  # a probe leaves the token free for this share of a period
NVML_ERROR_NOT_FOUND = 6  # nvmlDeviceGetSamples: no sample newer than asked
NVML_GPU_UTILIZATION_SAMPLES = 1

HeldNs = Callable[[int, int], int]  # (start, end) in the hold log's clock -> ns held in it


class BusySource(Protocol):
    """What the estimator reads about one GPU."""

    def running_pids(self, uuid: str) -> set[int]:
        """The pids of the compute processes running on the GPU."""
        ...

    def busy_samples(self, uuid: str, after_us: int) -> list[tuple[int, int]]:
        """(end of a sample period in µs of CLOCK_REALTIME, busy percent), for periods that
        ended after `after_us`, oldest first."""
        ...


class ProcessSource(BusySource, Protocol):
    """A BusySource that also names who ran (the host view of compute, outofturn.py)."""

    def process_samples(self, uuid: str, after_us: int) -> list[tuple[int, int, int]]:
        """(pid, end of its newest sample period in µs, busy percent: the mean of its samples)
        for each process named in a period that ended after `after_us`."""
        ...


class DemandEstimate:
    """The unmanaged demand u of one GPU, fed with its busy samples as they come."""

    def __init__(
        self, smoothing_ns: int = SMOOTHING_NS, demand_smoothing_ns: int = DEMAND_SMOOTHING_NS
    ) -> None:
        self.smoothing_ns = smoothing_ns
        self.demand_smoothing_ns = demand_smoothing_ns
        self.u = 0.0
        self.held_busy = 1.0  # how busy the GPU is while held, from periods held (nearly) whole
        self.last_end: int | None = None  # end of the newest period seen
        self.learn_from = 0  # periods that start no later say nothing of the present neighbours
        self.informed_end: int | None = None  # end of the newest period that taught u
        self.period_ns = DEFAULT_PERIOD_NS  # the spacing of the samples

    def add(self, samples: Iterable[tuple[int, float]], held: HeldNs) -> None:
        """Fold in (period end ns, busy fraction) samples, oldest first; each period starts
        where the previous sample ended. Samples not newer than the last one are skipped."""
        for end, busy in samples:
            start, self.last_end = self.last_end, max(end, self.last_end or end)
            if start is None or end <= start or start <= self.learn_from:
                continue
            period = end - start
            self.period_ns = period
            hold = min(max(held(start, end), 0), period)
            busy_ns = min(max(busy, 0.0), 1.0) * period
            weight = min(1.0, period / self.smoothing_ns)
            if period - hold < MIN_FREE_SHARE * period:
                # (Nearly) all held: nothing to learn of the others, but how busy a hold keeps
                # the GPU (below 1 where contexts time-slice: each switch idles it a little).
                if hold:
                    self.held_busy += weight * (min(busy_ns / hold, 1.0) - self.held_busy)
                continue
            demand = max(0.0, busy_ns - self.held_busy * hold) / (period - hold)
            # The period stands for the time since the last one that taught u (a probe's, after
            # seconds held throughout, for all of it).
            if self.informed_end is None or self.informed_end <= self.learn_from:
                weight = 1.0  # the first look since a neighbour came: it replaces the guess
            else:  # the free time it saw, or the time since the last period that taught u
                seen = max(period - hold, end - self.informed_end - period)
                weight = min(1.0, seen / self.demand_smoothing_ns)
            self.u += weight * (min(demand, 1.0) - self.u)
            self.informed_end = end

    def probe_due(self, now: int, last_probe: int) -> bool:
        """Whether no period has taught u for max(PROBE_EVERY_NS, PROBE_EVERY_PERIODS
        periods) before `now`, counting a probe asked for at `last_probe` as one that did; for
        a newcomer (nothing learnt, nor probed, since it came), two periods."""
        every = max(PROBE_EVERY_NS, PROBE_EVERY_PERIODS * self.period_ns)
        last = max(self.informed_end or 0, self.learn_from, last_probe)
        if (self.informed_end or 0) <= self.learn_from and last_probe <= self.learn_from:
            every = 2 * self.period_ns  # a newcomer: nothing learnt, nor probed, since it came
        return now - last >= every


class UnmanagedLoad:
    """Every GPU's unmanaged load u * k; never raises."""

    def __init__(self, source: BusySource | None) -> None:
        self.source = source
        self._estimates: dict[str, DemandEstimate] = {}
        self._last_us: dict[str, int] = {}  # the newest sample's end, per GPU
        self._had: dict[str, int] = {}  # k at the last poll, per GPU
        self._probed: dict[str, int] = {}  # when a probe was last asked for, per GPU
        self._failed: set[str] = set()

    def poll(
        self, uuid: str, managed: set[int], held: HeldNs, offset_ns: int, now_ns: int = 0
    ) -> float:
        """Read the GPU at `now_ns` (the hold log's clock). `offset_ns` turns CLOCK_REALTIME ns
        into that clock."""
        if self.source is None:
            return 0.0
        try:
            unmanaged = self.source.running_pids(uuid) - managed
            samples = self.source.busy_samples(uuid, self._last_us.get(uuid, 0))
        except Exception as err:  # NVMLError and its kin: a GPU lost, a call not supported
            if uuid not in self._failed:
                self._failed.add(uuid)
                log.warning("NVML failed for %s, unmanaged load taken as none: %s", uuid, err)
            return 0.0
        if samples:
            self._last_us[uuid] = samples[-1][0]
        first = uuid not in self._estimates
        estimate = self._estimates.setdefault(uuid, DemandEstimate())
        if first:  # the history before this arbiter: only where it ends
            samples = samples[-1:]
        if unmanaged and not self._had.get(uuid):
            estimate.u = 1.0  # a new neighbour: assume it saturates until measured
            # The period it was seen in holds time before it ran: learn from the next one on.
            estimate.learn_from = estimate.last_end or now_ns
        self._had[uuid] = len(unmanaged)
        estimate.add([(end * 1000 + offset_ns, busy / 100) for end, busy in samples], held)
        return estimate.u * len(unmanaged)

    def probe_gap(self, uuid: str, now_ns: int) -> int:
        """How long the GPU's token should be left free now so that a period teaches u (a
        quarter of a period), or 0: no process outside the containers, or u learnt lately."""
        estimate = self._estimates.get(uuid)
        if estimate is None or not self._had.get(uuid):
            return 0
        if not estimate.probe_due(now_ns, self._probed.get(uuid, 0)):
            return 0
        self._probed[uuid] = now_ns
        return round(PROBE_GAP_SHARE * estimate.period_ns)

    def forget(self, uuid: str) -> None:
        """Drop a GPU that no container limits any more."""
        self._probed.pop(uuid, None)
        self._estimates.pop(uuid, None)
        self._last_us.pop(uuid, None)
        self._had.pop(uuid, None)
        self._failed.discard(uuid)


class NvmlSource:
    """BusySource through nvidia-ml-py."""

    def __init__(self, nvml: ModuleType) -> None:
        self._nvml = nvml
        self._handles: dict[str, Any] = {}

    @classmethod
    def open(cls) -> NvmlSource | None:
        """Initialise NVML; None (logged) when it is missing or fails."""
        try:
            nvml = importlib.import_module("pynvml")
            nvml.nvmlInit()
        except Exception as err:  # ImportError, NVMLError_LibraryNotFound, driver errors
            log.warning("NVML unavailable, unmanaged load taken as none (f = 1): %s", err)
            return None
        return cls(nvml)

    def close(self) -> None:
        """Shut NVML down."""
        try:
            self._nvml.nvmlShutdown()
        except Exception as err:  # already shut down, driver gone
            log.debug("nvmlShutdown: %s", err)

    def _handle(self, uuid: str) -> Any:
        if uuid not in self._handles:
            self._handles[uuid] = self._nvml.nvmlDeviceGetHandleByUUID(uuid)
        return self._handles[uuid]

    def running_pids(self, uuid: str) -> set[int]:
        """NVML's compute processes on the GPU."""
        listed = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle(uuid))
        return {int(info.pid) for info in listed}

    def busy_samples(self, uuid: str, after_us: int) -> list[tuple[int, int]]:
        """NVML_GPU_UTILIZATION_SAMPLES newer than `after_us`."""
        try:
            _, samples = self._nvml.nvmlDeviceGetSamples(
                self._handle(uuid), NVML_GPU_UTILIZATION_SAMPLES, after_us
            )
        except self._nvml.NVMLError as err:
            if getattr(err, "value", None) == NVML_ERROR_NOT_FOUND:
                return []
            raise
        found = [(int(s.timeStamp), int(s.sampleValue.uiVal)) for s in samples]
        return sorted(found)

    def process_samples(self, uuid: str, after_us: int) -> list[tuple[int, int, int]]:
        """(pid, end of its newest sample period in µs, SM busy percent: the mean of its samples
        newer than `after_us`) for each process NVML named in a period after `after_us`."""
        try:
            found = self._nvml.nvmlDeviceGetProcessUtilization(self._handle(uuid), after_us)
        except self._nvml.NVMLError as err:
            if getattr(err, "value", None) == NVML_ERROR_NOT_FOUND:
                return []
            raise
        return [(int(s.pid), int(s.timeStamp), int(s.smUtil)) for s in found]
