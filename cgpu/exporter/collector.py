"""The Prometheus collector: every scrape reads the state dir, NVML and pod-resources afresh.

Series exist only while their container directory (or GPU) does, because nothing is kept between
scrapes except caches of facts that do not change (NVML handles, meta.json, pod assignments), the
cumulative counts of skipped ledgers and compute status files, and the texts
`cgpu.exporter.exposition` renders label sets and values to (functions of what they render,
never of when).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from cgpu.core.computestatus import (
    BEST_EFFORT,
    PROBLEMS,
    ComputeStatus,
    ContainerCompute,
    read_status,
    status_path,
)
from cgpu.core.hostview import Attributor, HostView
from cgpu.exporter.enforce import Enforcer, KillLabels, over_slice
from cgpu.exporter.exposition import Family
from cgpu.exporter.families import (
    COMPUTE_STATUS_ERRORS,
    COMPUTE_STATUS_UP,
    KILLS,
    LEDGER_ERRORS,
    LEDGERS_SKIPPED,
    NVML_UP,
    POD_RESOURCES_UP,
    SCRAPE_DURATION,
    Families,
)
from cgpu.exporter.labels import Identity, device_ids, resolve
from cgpu.exporter.nvml import GpuStatus, NvmlSource
from cgpu.exporter.podresources import PodResourcesSource
from cgpu.exporter.scan import ALL_REASONS, Caches, ScanResult, scan

log = logging.getLogger(__name__)

# The reasons of cgpu_compute_status_errors_total: a whole file skipped, or one entry.
STATUS_REASONS = (*PROBLEMS, "entry")


@dataclass
class _Slice:
    """One container's share of one GPU, after merging directories with the same labels."""

    limit: int = 0
    used: int = 0
    peak: int = 0
    processes: int = 0
    host_used: int | None = None  # None: NVML gave no process list for this GPU
    over: bool = False
    ledger_ok: bool = True  # False: a directory's ledger is damaged; no ledger figures
    compute_limit: int = 0  # percent of the GPU's time; 0: no compute limit
    compute_kind: tuple[str, str] = ("", "")  # (policy, priority) from cgpu.conf
    compute_used: float = 0.0  # percent of the GPU's time lately, as the shim measured it
    # From the compute arbiter's status file (the host's); None where it has no figure.
    charged: float | None = None  # percent: the turns the arbiter charged, over ~1 s
    host_percent: float | None = None  # percent the host attributes to it over 10 s
    out_of_turn: float | None = None  # seconds of GPU time outside its turns
    over_compute: bool | None = None  # flagged for out-of-turn work

    def add_compute(self, figures: ContainerCompute, host_view: bool | None) -> None:
        """Add one directory's host figures (directories merged into one container add up)."""
        self.charged = _plus(self.charged, figures.share_percent)
        if host_view is not False:
            self.host_percent = _plus(self.host_percent, figures.host_percent)
        self.out_of_turn = _plus(self.out_of_turn, figures.out_of_turn_s)
        if figures.over_compute is not None:
            self.over_compute = bool(self.over_compute) or figures.over_compute


def _plus(total: float | None, value: float | None) -> float | None:
    """`total + value`, where None is no figure (not 0)."""
    if value is None:
        return total
    return value if total is None else total + value


@dataclass
class Observation:
    """Everything one pass read: the containers, the GPUs and the host's view of their use."""

    result: ScanResult
    gpus: list[GpuStatus]
    view: HostView
    identities: dict[str, Identity]
    index: dict[str, str]

    def labels(self, key: str, uuid: str) -> KillLabels:
        """The container series labels of a container directory on a GPU."""
        ident = self.identities.get(key, Identity("", "", key))
        return (ident.namespace, ident.pod, ident.container, uuid, self.index.get(uuid, ""))


class CgpuCollector(Collector):
    """Collects the cgpu metrics of one node; safe to call from concurrent scrapes."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        gpus: NvmlSource | None = None,
        pods: PodResourcesSource | None = None,
        clock: Callable[[], float] = time.perf_counter,
        attributor: Attributor | None = None,
        allowance: int = 0,
        enforcer: Enforcer | None = None,
    ) -> None:
        self._state_dir = state_dir
        self._gpus = gpus
        self._pods = pods
        self._clock = clock
        self._attributor = attributor
        self._allowance = allowance
        self._enforcer = enforcer
        self._caches = Caches()
        self._errors: Counter[str] = Counter({reason: 0 for reason in ALL_REASONS})
        self._status_path = status_path(state_dir)
        self._status_errors: Counter[str] = Counter({reason: 0 for reason in STATUS_REASONS})
        self._lock = threading.Lock()

    def describe(self) -> Iterator[Metric]:
        """The families this collector serves, without reading anything."""
        yield from Families().all()
        yield from self._exporter_families(Counter(), 0.0, Counter(), None)

    def observe(self) -> Observation:
        """One pass: the state dir, NVML (GPUs and their processes) and the labels."""
        with self._lock:
            return self._observe()

    def enforce(self) -> list[int]:
        """One enforcement check (no-op without an enforcer); returns the pids killed."""
        if self._enforcer is None:
            return []
        with self._lock:
            seen = self._observe()
            return self._enforcer.check(seen.result.containers, seen.view, seen.labels)

    def _observe(self) -> Observation:
        result = scan(self._state_dir, self._caches)
        gpus = self._gpus.gpus() if self._gpus is not None else []
        view = HostView()
        if self._attributor is not None and self._gpus is not None:
            try:
                view = self._attributor.attribute(result.containers, self._gpus.processes())
            except Exception:  # the ledger series must not depend on the host view
                log.exception("host view failed at this pass")
        containers = result.containers
        wanted = [i for c in containers for i in device_ids(c.meta)]
        by_device = self._pods.devices(wanted) if self._pods is not None else {}
        identities = {c.key: resolve(c.key, c.meta, by_device) for c in containers}
        index = {g.uuid: str(g.index) for g in gpus}
        return Observation(result, gpus, view, identities, index)

    def collect(self) -> Iterator[Metric]:
        """Read everything and yield the metric families of this scrape."""
        with self._lock:
            start = self._clock()
            families = Families()
            seen = self._observe()
            self._errors.update(seen.result.skipped)
            status = self._read_status()
            self._fill(families, seen, status)
            elapsed = self._clock() - start
            kills = Counter(self._enforcer.kills) if self._enforcer is not None else Counter()
            metrics = families.all() + list(
                self._exporter_families(seen.result.skipped, elapsed, kills, status)
            )
        yield from metrics

    def _read_status(self) -> ComputeStatus:
        """The compute arbiter's status file, its problems counted (never raises)."""
        status = read_status(self._status_path)
        if status.state in PROBLEMS:
            self._status_errors[status.state] += 1
            log.debug("compute status skipped: %s", status.error)
        if status.bad_entries:
            self._status_errors["entry"] += 1
        return status

    def _fill(self, fam: Families, seen: Observation, status: ComputeStatus) -> None:
        gpus, index, view = seen.gpus, seen.index, seen.view
        compute = status.by_key(self._state_dir)
        host_views = {uuid: gpu.host_view for uuid, gpu in status.gpus.items()}
        over = {
            (o.key, o.uuid)
            for o in over_slice(seen.result.containers, view, self._allowance, False)
        }

        # Merge directories that resolve to the same container on the same GPU (a restarted
        # container whose old directory is not yet removed), so no series is emitted twice.
        slices: dict[tuple[str, str, str, str], _Slice] = {}
        for usage in seen.result.containers:
            ident = seen.identities[usage.key]
            for dev in usage.devices:
                s = slices.setdefault(
                    (ident.namespace, ident.pod, ident.container, dev.uuid), _Slice()
                )
                s.limit = max(s.limit, dev.limit)
                s.used += dev.used
                s.peak = max(s.peak, dev.peak)
                s.processes += dev.processes
                s.ledger_ok = s.ledger_ok and usage.ledger_ok
                s.compute_limit = max(s.compute_limit, dev.compute_limit)
                if dev.compute_limit:
                    s.compute_kind = (dev.compute_policy, dev.compute_priority or "normal")
                s.compute_used += dev.compute_used
                figures = compute.get((usage.key, dev.uuid))
                if figures is not None:
                    s.add_compute(figures, host_views.get(dev.uuid))
                    if not dev.compute_limit and figures.policy == BEST_EFFORT:
                        s.compute_kind = (BEST_EFFORT, figures.priority or "normal")
                if dev.uuid in view.gpus:
                    s.host_used = (s.host_used or 0) + view.used(usage.key, dev.uuid)
                    s.over = s.over or (usage.key, dev.uuid) in over

        claims = {
            (i.namespace, i.pod, i.container, i.claim)
            for i in (seen.identities[u.key] for u in seen.result.containers)
            if i.claim
        }
        for claim_labels in sorted(claims):
            fam.claim_info.add(claim_labels, 1)

        allocated: Counter[str] = Counter({g.uuid: 0 for g in gpus})
        members: Counter[str] = Counter({g.uuid: 0 for g in gpus})
        for (namespace, pod, container, uuid), s in slices.items():
            labels = (namespace, pod, container, uuid, index.get(uuid, ""))
            if s.ledger_ok:
                fam.limit.add(labels, s.limit)
                fam.used.add(labels, s.used)
                fam.peak.add(labels, s.peak)
                fam.processes.add(labels, s.processes)
                if s.compute_limit:
                    fam.compute_limit.add(labels, s.compute_limit)
                if s.compute_limit or s.compute_kind[0] == BEST_EFFORT:
                    fam.compute_info.add((*labels, *s.compute_kind), 1)
                    used = s.compute_used if s.charged is None else s.charged
                    fam.compute_used.add(labels, used)
            # The host's figures, whatever the container did to its own ledger.
            if s.host_percent is not None:
                fam.compute_host.add(labels, s.host_percent)
            if s.out_of_turn is not None:
                fam.out_of_turn.add(labels, s.out_of_turn)
            if s.over_compute is not None:
                fam.over_compute.add(labels, 1 if s.over_compute else 0)
            if s.host_used is not None:
                fam.host_used.add(labels, s.host_used)
                fam.over_slice.add(labels, 1 if s.over else 0)
            allocated[uuid] += s.limit
            members[uuid] += 1

        for uuid, total in allocated.items():
            labels = (uuid, index.get(uuid, ""))
            fam.gpu_allocated.add(labels, total)
            fam.gpu_containers.add(labels, members[uuid])
        for uuid in sorted(view.gpus):
            fam.gpu_unattributed.add((uuid, index.get(uuid, "")), view.unattributed[uuid])
        for g in gpus:
            labels = (g.uuid, str(g.index), g.model)
            fam.gpu_healthy.add(labels, 1 if g.healthy else 0)
            if g.total is not None and g.used is not None:
                fam.gpu_total.add(labels, g.total)
                fam.gpu_used.add(labels, g.used)

    def _exporter_families(
        self,
        skipped: Counter[str],
        elapsed: float,
        kills: Counter[KillLabels],
        status: ComputeStatus | None,
    ) -> Iterator[Metric]:
        killed = Family(KILLS)
        for labels, count in sorted(kills.items()):
            killed.add(labels, count)
        yield killed
        errors, current = Family(LEDGER_ERRORS), Family(LEDGERS_SKIPPED)
        for reason in ALL_REASONS:
            errors.add((reason,), self._errors[reason])
            current.add((reason,), skipped[reason])
        yield errors
        yield current
        status_errors = Family(COMPUTE_STATUS_ERRORS)
        for reason in STATUS_REASONS:
            status_errors.add((reason,), self._status_errors[reason])
        yield status_errors
        yield Family(COMPUTE_STATUS_UP, 1 if status is not None and status.current else 0)
        yield Family(NVML_UP, 1 if self._gpus is not None and self._gpus.up else 0)
        yield Family(POD_RESOURCES_UP, 1 if self._pods is not None and self._pods.up else 0)
        yield Family(SCRAPE_DURATION, elapsed)
