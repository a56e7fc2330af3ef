"""Whether a node's GPUs can hold a request, which GPUs to use, and how to rank nodes.

Pure functions over a node's free units; no locking and no I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .podspec import COUNT_RESOURCE, GpuRequest

MAX_SCORE = 10  # kube-scheduler's MaxExtenderPriority


@dataclass(frozen=True)
class NodeView:
    """An immutable picture of one node: units per GPU, free units of each GPU, unplaced units.

    `unplaced` counts units of pods bound to the node without a GPU index (bound by something
    other than an extender): they hold memory somewhere on the node.
    """

    per_gpu: int
    free: tuple[int, ...]
    unplaced: int = 0
    error: str | None = None
    largest: int = field(init=False)  # the most free units on one GPU
    spare: int = field(init=False)  # free units on all GPUs, less the unplaced ones

    def __post_init__(self) -> None:
        object.__setattr__(self, "largest", max(self.free, default=0))
        object.__setattr__(self, "spare", sum(self.free) - self.unplaced)

    @property
    def capacity(self) -> int:
        return self.per_gpu * len(self.free)


@dataclass(frozen=True)
class Verdict:
    """The GPUs chosen, or why none: `permanent` when no amount of freeing would help."""

    gpus: tuple[int, ...] = ()
    reason: str = ""
    permanent: bool = False

    @property
    def fits(self) -> bool:
        return not self.reason


FITS = Verdict()


def check(view: NodeView, request: GpuRequest) -> Verdict:
    """Whether the node can take the request now (FITS), without choosing GPUs: filter's path."""
    if (
        not view.error
        and request.count == 1
        and request.per_gpu <= view.largest
        and request.total <= view.spare
    ):
        return FITS  # the common case, in a few comparisons
    verdict = place(view, request, "binpack")
    return FITS if verdict.fits else verdict


def place(view: NodeView, request: GpuRequest, gpu_policy: str) -> Verdict:
    """Choose `request.count` distinct GPUs that each have `request.per_gpu` free units."""
    if view.error:
        return Verdict(reason=view.error, permanent=True)
    need, count = request.per_gpu, request.count
    gpus = len(view.free)
    if count > gpus:
        return Verdict(
            reason=f"pod needs {count} GPUs ({COUNT_RESOURCE}={count}), the node has {gpus}",
            permanent=True,
        )
    if need > view.per_gpu:
        return Verdict(
            reason=f"pod needs {need} units on one GPU, the node's GPUs have {view.per_gpu}",
            permanent=True,
        )
    candidates = [i for i, free in enumerate(view.free) if free >= need]
    if len(candidates) < count:
        if count == 1:
            reason = f"no single GPU has {need} free units (largest free: {view.largest})"
        else:
            reason = (
                f"only {len(candidates)} of {gpus} GPUs have {need} free units, "
                f"the pod needs {count} ({COUNT_RESOURCE}={count})"
            )
        return Verdict(reason=reason)
    if view.unplaced and view.spare < request.total:
        return Verdict(
            reason=f"pods bound without a GPU index hold {view.unplaced} units: "
            f"{max(view.spare, 0)} left, the pod needs {request.total}"
        )
    if gpu_policy == "spread":
        candidates.sort(key=lambda i: (-view.free[i], i))
    else:  # binpack: the fullest GPU that still fits
        candidates.sort(key=lambda i: (view.free[i], i))
    return Verdict(gpus=tuple(sorted(candidates[:count])))


def score(view: NodeView, request: GpuRequest, node_policy: str) -> int:
    """0..10: binpack favours the node left fullest, spread the node left emptiest."""
    if view.error or not view.capacity:
        return 0
    used_after = view.capacity - view.spare + request.total
    used_after = min(max(used_after, 0), view.capacity)
    ratio = used_after / view.capacity
    if node_policy == "spread":
        ratio = 1.0 - ratio
    return round(ratio * MAX_SCORE)
