"""Whether a node's GPUs can hold a request, which GPUs to use, and how to rank nodes.

Pure functions over a node's free units; no locking and no I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .podspec import COMPUTE_RESOURCE, COUNT_RESOURCE, GpuRequest

MAX_SCORE = 10  # kube-scheduler's MaxExtenderPriority


@dataclass(frozen=True)
class NodeView:
    """An immutable picture of one node: units per GPU, free units of each GPU, unplaced units.

    `unplaced` counts units of pods bound to the node without a GPU index (bound by something
    other than an extender): they hold memory somewhere on the node. The `compute_*` fields are
    the same for aliyun.com/gpu-core.percentage (percent per GPU; `compute_per_gpu` 0 when the
    node advertises none, `compute_error` saying why when its capacity is malformed).
    """

    per_gpu: int
    free: tuple[int, ...]
    unplaced: int = 0
    error: str | None = None
    compute_per_gpu: int = 0
    compute_free: tuple[int, ...] = ()
    compute_unplaced: int = 0
    compute_error: str | None = None
    largest: int = field(init=False)  # the most free units on one GPU
    spare: int = field(init=False)  # free units on all GPUs, less the unplaced ones
    compute_spare: int = field(init=False)  # the same for compute

    def __post_init__(self) -> None:
        object.__setattr__(self, "largest", max(self.free, default=0))
        object.__setattr__(self, "spare", sum(self.free) - self.unplaced)
        object.__setattr__(self, "compute_spare", sum(self.compute_free) - self.compute_unplaced)

    @property
    def capacity(self) -> int:
        return self.per_gpu * len(self.free)

    @property
    def compute_capacity(self) -> int:
        return self.compute_per_gpu * len(self.compute_free)

    def compute_left(self, gpu: int) -> int:
        """Free percent of compute on one GPU (0 when the node advertises no compute)."""
        return self.compute_free[gpu] if gpu < len(self.compute_free) else 0

    def left(self, gpu: int) -> float:
        """How empty one GPU is, 0..2: its free memory fraction plus its free compute fraction
        (the latter only when the node advertises compute). The GPU policies sort on it."""
        memory = self.free[gpu] / self.per_gpu if self.per_gpu else 0.0
        if not self.compute_per_gpu:
            return memory
        return memory + self.compute_left(gpu) / self.compute_per_gpu


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
        and not request.compute
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
    if request.compute:
        return _place_with_compute(view, request, gpu_policy)
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
    return Verdict(gpus=tuple(sorted(_order(view, candidates, gpu_policy)[:count])))


def _order(view: NodeView, candidates: list[int], gpu_policy: str) -> list[int]:
    """binpack: the fullest GPU that fits first; spread: the emptiest (see NodeView.left)."""
    if gpu_policy == "spread":
        return sorted(candidates, key=lambda i: (-view.left(i), i))
    return sorted(candidates, key=lambda i: (view.left(i), i))


def _place_with_compute(view: NodeView, request: GpuRequest, gpu_policy: str) -> Verdict:
    """One GPU holding both the pod's memory and its compute (a compute share is one-GPU)."""
    need, percent = request.per_gpu, request.compute
    if not view.compute_per_gpu:
        reason = view.compute_error or f"node advertises no {COMPUTE_RESOURCE}"
        return Verdict(reason=reason, permanent=True)
    if percent > view.compute_per_gpu:
        return Verdict(
            reason=f"pod needs {percent}% compute on one GPU, the node's GPUs have "
            f"{view.compute_per_gpu}%",
            permanent=True,
        )
    gpus = range(len(view.free))
    candidates = [i for i in gpus if view.free[i] >= need and view.compute_left(i) >= percent]
    if not candidates:
        return Verdict(reason=_no_gpu_reason(view, need, percent))
    if view.unplaced and need and view.spare < need:
        return Verdict(
            reason=f"pods bound without a GPU index hold {view.unplaced} units: "
            f"{max(view.spare, 0)} left, the pod needs {need}"
        )
    if view.compute_unplaced and view.compute_spare < percent:
        return Verdict(
            reason=f"pods bound without a GPU index hold {view.compute_unplaced}% compute: "
            f"{max(view.compute_spare, 0)}% left, the pod needs {percent}%"
        )
    return Verdict(gpus=(_order(view, candidates, gpu_policy)[0],))


def _no_gpu_reason(view: NodeView, need: int, percent: int) -> str:
    """Why no GPU holds both, naming the GPU that comes closest."""
    if not need:
        best = max((view.compute_left(i) for i in range(len(view.free))), default=0)
        return f"no GPU has {percent}% free compute (most free: {best}%)"

    def closeness(i: int) -> tuple[float, int, int]:
        mem = min(view.free[i] / need, 1.0)
        cpu = min(view.compute_left(i) / percent, 1.0)
        return (mem + cpu, view.free[i], view.compute_left(i))

    best_gpu = max(range(len(view.free)), key=closeness, default=None)
    if best_gpu is None:
        return "the node has no GPUs"
    return (
        f"no GPU has both {need} free units and {percent}% free compute "
        f"(best: GPU {best_gpu} with {view.free[best_gpu]} units and "
        f"{view.compute_left(best_gpu)}%)"
    )


def _ratio_after(capacity: int, spare: int, asked: int) -> float:
    used_after = min(max(capacity - spare + asked, 0), capacity)
    return used_after / capacity


def score(view: NodeView, request: GpuRequest, node_policy: str) -> int:
    """0..10: binpack favours the node left fullest, spread the node left emptiest.

    "Full" is the memory used after placing the pod, over the node's memory; on a node that
    advertises compute it is the mean of that and the same ratio for compute.
    """
    if view.error or not view.capacity:
        return 0
    ratio = _ratio_after(view.capacity, view.spare, request.total)
    if view.compute_capacity:
        compute = _ratio_after(view.compute_capacity, view.compute_spare, request.compute)
        ratio = (ratio + compute) / 2
    if node_policy == "spread":
        ratio = 1.0 - ratio
    return round(ratio * MAX_SCORE)
