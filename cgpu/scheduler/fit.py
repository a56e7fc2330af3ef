"""Whether a node's GPUs can hold a request, which GPUs to use, and how to rank nodes.

Pure functions over a node's free units; no locking and no I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cgpu.core.layout import GPU_CORE, GPU_COUNT

from .podspec import GpuRequest

MAX_SCORE = 10  # kube-scheduler's MaxExtenderPriority


@dataclass(frozen=True)
class NodeView:
    """An immutable picture of one node: units per GPU, free units of each GPU, unplaced units.

    `unplaced` counts units of pods bound to the node without a GPU index (bound by something
    other than an extender): they hold memory somewhere on the node. The `compute_*` fields are
    the same for aliyun.com/gpu-core.percentage (percent per GPU; `compute_per_gpu` 0 when the
    node advertises none, `compute_error` saying why when its capacity is malformed).

    `unlimited` counts, per GPU, the pods there that hold GPU memory but ask for no compute
    (never gated on a node without the compute arbiter: see "The compute ceiling beside pods
    without a limit" in docs/operations-scheduler.md); empty when the ceiling is not counted
    (`--unlimited-neighbours=ignore`, the default, or no compute advertised).
    """

    per_gpu: int
    free: tuple[int, ...]
    unplaced: int = 0
    error: str | None = None
    compute_per_gpu: int = 0
    compute_free: tuple[int, ...] = ()
    compute_unplaced: int = 0
    compute_error: str | None = None
    unlimited: tuple[int, ...] = ()
    largest: int = field(init=False)  # the most free units on one GPU
    spare: int = field(init=False)  # free units on all GPUs, less the unplaced ones
    compute_spare: int = field(init=False)  # the same for compute
    usable_spare: int = field(init=False)  # compute_spare within each GPU's ceiling
    closed: tuple[int, ...] = field(init=False)  # GPUs a pod without a compute limit may not join

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "largest", max(self.free, default=0))
        set_(self, "spare", sum(self.free) - self.unplaced)
        set_(self, "compute_spare", sum(self.compute_free) - self.compute_unplaced)
        gpus = range(len(self.compute_free))
        usable = sum(self.compute_usable(i) for i in gpus)
        set_(self, "usable_spare", usable - self.compute_unplaced)
        set_(self, "closed", tuple(i for i in gpus if not self.takes_unlimited(i)))

    @property
    def capacity(self) -> int:
        return self.per_gpu * len(self.free)

    @property
    def compute_capacity(self) -> int:
        return self.compute_per_gpu * len(self.compute_free)

    def compute_left(self, gpu: int) -> int:
        """Free percent of compute on one GPU (0 when the node advertises no compute)."""
        return self.compute_free[gpu] if gpu < len(self.compute_free) else 0

    def placed(self, gpu: int) -> int:
        """Percent of compute the compute-limited pods on one GPU ask for together."""
        return self.compute_per_gpu - self.compute_left(gpu) if self.compute_free else 0

    def unlimited_on(self, gpu: int) -> int:
        """Pods without a compute limit on one GPU (0 when the ceiling is not counted)."""
        return self.unlimited[gpu] if gpu < len(self.unlimited) else 0

    def ceiling(self, gpu: int, more: int = 0) -> int:
        """The most compute the compute-limited pods on one GPU get together beside its pods
        without a compute limit (and `more` such pods): an even time slice each."""
        return self.compute_per_gpu // (self.unlimited_on(gpu) + more + 1)

    def compute_room(self, gpu: int) -> int:
        """The most compute a compute-limited pod can be given on one GPU: its free compute,
        within the ceiling when the ceiling is counted."""
        if not self.unlimited:
            return self.compute_left(gpu)
        return min(self.compute_left(gpu), self.ceiling(gpu) - self.placed(gpu))

    def compute_usable(self, gpu: int) -> int:
        """Free compute as the rankings see it: compute_room on a GPU that runs compute-limited
        pods, the free compute on one that runs none (ranked as before the ceiling)."""
        return self.compute_room(gpu) if self.placed(gpu) > 0 else self.compute_left(gpu)

    def takes_unlimited(self, gpu: int) -> bool:
        """Whether a pod without a compute limit may join one GPU: the compute-limited pods
        there must stay within the ceiling it lowers (always, when it is not counted)."""
        return not self.unlimited or self.placed(gpu) <= self.ceiling(gpu, more=1)

    def left(self, gpu: int) -> float:
        """How empty one GPU is, 0..2: its free memory fraction plus its usable free compute
        fraction (the latter only when the node advertises compute). The GPU policies sort on
        it."""
        memory = self.free[gpu] / self.per_gpu if self.per_gpu else 0.0
        if not self.compute_per_gpu:
            return memory
        return memory + self.compute_usable(gpu) / self.compute_per_gpu


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
        and not view.closed
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
            reason=f"pod needs {count} GPUs ({GPU_COUNT}={count}), the node has {gpus}",
            permanent=True,
        )
    if need > view.per_gpu:
        return Verdict(
            reason=f"pod needs {need} units on one GPU, the node's GPUs have {view.per_gpu}",
            permanent=True,
        )
    if request.compute:
        return _place_with_compute(view, request, gpu_policy)
    roomy = [i for i, free in enumerate(view.free) if free >= need]
    candidates = [i for i in roomy if i not in view.closed]
    if len(roomy) >= count > len(candidates):
        return Verdict(reason=_closed_reason(view, roomy, candidates, need, count))
    if len(candidates) < count:
        if count == 1:
            reason = f"no single GPU has {need} free units (largest free: {view.largest})"
        else:
            reason = (
                f"only {len(candidates)} of {gpus} GPUs have {need} free units, "
                f"the pod needs {count} ({GPU_COUNT}={count})"
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
        reason = view.compute_error or f"node advertises no {GPU_CORE}"
        return Verdict(reason=reason, permanent=True)
    if percent > view.compute_per_gpu:
        return Verdict(
            reason=f"pod needs {percent}% compute on one GPU, the node's GPUs have "
            f"{view.compute_per_gpu}%",
            permanent=True,
        )
    gpus = range(len(view.free))
    free = [i for i in gpus if view.free[i] >= need and view.compute_left(i) >= percent]
    candidates = [i for i in free if view.compute_room(i) >= percent]
    if free and not candidates:
        return Verdict(reason=_ceiling_reason(view, free, percent))
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


def _pods(n: int) -> str:
    return f"{n} pod{'' if n == 1 else 's'} without a compute limit"


def _ceiling_reason(view: NodeView, free: list[int], percent: int) -> str:
    """Why GPUs with the free compute still refuse a compute-limited pod: their ceiling.
    Names the one with the most room."""
    gpu = max(free, key=lambda i: (view.compute_room(i), -i))
    return (
        f"GPU {gpu} runs {_pods(view.unlimited_on(gpu))}: compute-limited pods there get at "
        f"most {view.ceiling(gpu)}% together ({view.placed(gpu)}% placed, the pod needs "
        f"{percent}%)"
    )


def _closed_reason(
    view: NodeView, roomy: list[int], candidates: list[int], need: int, count: int
) -> str:
    """Why GPUs with the free memory refuse a pod without a compute limit: the compute-limited
    pods there would pass the ceiling it lowers. Names the one closest to taking it."""
    gpu = min((i for i in roomy if i in view.closed), key=lambda i: (view.placed(i), i))
    now = view.unlimited_on(gpu)
    beside = f"{now} there now and this one" if now else "this one"
    why = (
        f"GPU {gpu} runs compute-limited pods with {view.placed(gpu)}% placed: beside "
        f"{_pods(now + 1)} ({beside}) they would get at most {view.ceiling(gpu, more=1)}% "
        "together"
    )
    if count == 1:
        return why
    return (
        f"only {len(candidates)} of {len(roomy)} GPUs with {need} free units take a pod "
        f"without a compute limit, the pod needs {count} ({GPU_COUNT}={count}): {why}"
    )


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
    advertises compute it is the mean of that and the same ratio for compute (free compute
    counted within each GPU's ceiling, see NodeView.compute_usable).
    """
    if view.error or not view.capacity:
        return 0
    ratio = _ratio_after(view.capacity, view.spare, request.total)
    if view.compute_capacity:
        compute = _ratio_after(view.compute_capacity, view.usable_spare, request.compute)
        ratio = (ratio + compute) / 2
    if node_policy == "spread":
        ratio = 1.0 - ratio
    return round(ratio * MAX_SCORE)
