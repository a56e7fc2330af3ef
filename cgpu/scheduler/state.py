"""The extender's view of the cluster: GPU nodes, the pods holding their units, assumptions.

Everything here comes from the API server (node capacity, pod annotations and phases) except
the assume cache: units reserved by a bind in progress or bound but not yet seen in the watch.

Locking: `self.lock` guards the pod index; each node's lock guards its holdings; `_assume_lock`
guards the uid -> node map of assumptions. They are taken in that order only, never across an
API call, so no lock can stick. Readers (filter, prioritize) take no lock: each node publishes
an immutable NodeView after every change.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cgpu.core.podcontract import PodContract

from .fit import NodeView
from .podspec import (
    NodeGpus,
    SpecError,
    container_compute,
    container_units,
    contract,
    node_gpus,
    pod_compute,
)

TERMINAL = ("Succeeded", "Failed")


@dataclass
class Holding:
    """Units one pod holds on a node: `per_gpu` on each of `gpus` (empty = no index yet), and
    `compute` percent of its GPU's compute (a compute share is on one GPU)."""

    namespace: str
    name: str
    gpus: tuple[int, ...]
    per_gpu: int
    compute: int = 0
    assumed: bool = False
    deadline: float = 0.0  # when an assumption not yet confirmed expires
    in_flight: bool = False  # a bind is still talking to the API server

    @property
    def total(self) -> int:
        return self.per_gpu * max(len(self.gpus), 1)


@dataclass
class NodeState:
    """One node: its advertised GPUs and the holdings on it."""

    name: str
    gpus: NodeGpus = field(default_factory=lambda: NodeGpus(0, 0, "node not seen yet"))
    known: bool = False  # the node object exists in the API server
    ip: str = ""
    holdings: dict[str, Holding] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    view: NodeView = field(default_factory=lambda: NodeView(0, (), 0, "node not seen yet"))
    count_unlimited: bool = False  # count the compute ceiling beside pods without a limit

    def refresh(self) -> None:
        """Recompute the published view (caller holds self.lock)."""
        count, per_gpu = self.gpus.count, self.gpus.per_gpu
        used = [0] * count
        compute_used = [0] * count
        unlimited = [0] * count
        unplaced = compute_unplaced = 0
        for holding in self.holdings.values():
            if not holding.gpus:
                unplaced += holding.total
                compute_unplaced += holding.compute
            for gpu in holding.gpus:
                if gpu < count:
                    used[gpu] += holding.per_gpu
                    compute_used[gpu] += holding.compute
                    unlimited[gpu] += not holding.compute  # memory, no compute limit
        error = self.gpus.error if self.known else "node is unknown to the API server"
        free = tuple(per_gpu - u for u in used)
        compute = self.gpus.compute_per_gpu
        self.view = NodeView(
            per_gpu,
            free,
            unplaced,
            error,
            compute,
            tuple(compute - u for u in compute_used) if compute else (),
            compute_unplaced,
            self.gpus.compute_error,
            tuple(unlimited) if compute and self.count_unlimited else (),
        )


@dataclass(frozen=True)
class PodRecord:
    """The parts of a pod the extender keeps (only pods asking for GPU memory or compute)."""

    uid: str
    namespace: str
    name: str
    node: str
    phase: str
    deleting: bool
    resource_version: str
    raw: dict[str, Any] | None  # metadata and spec of a pod not bound yet, for bind

    @property
    def active(self) -> bool:
        return self.phase not in TERMINAL


def _node_ip(node: dict[str, Any]) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address", ""))
    return ""


def _holding_of(pod: PodContract, units: list[int], compute: int) -> Holding:
    """What the pod holds: ALIYUN_COM_GPU_MEM_POD when the extender wrote it, else its
    containers' units; on its ALIYUN_COM_GPU_MEM_IDX GPUs (none: not placed yet)."""
    gpus = pod.gpu_indexes or ()
    total = pod.pod_units if pod.pod_units is not None else sum(units)
    if gpus:
        return Holding(pod.namespace, pod.name, gpus, total // len(gpus), compute)
    return Holding(pod.namespace, pod.name, (), total, compute)


def _pod_compute(pod: PodContract) -> int:
    """The pod's compute percent; a malformed one holds nothing (the scheduler cannot place
    it), while one past 100 that a node runs anyway holds what it asked."""
    try:
        return pod_compute(pod)
    except SpecError:
        try:
            return sum(container_compute(pod))
        except SpecError:
            return 0


class ClusterState:
    """Nodes, GPU pods and assumptions, updated by the informers and the binder."""

    def __init__(self, count_unlimited: bool = False) -> None:
        """`count_unlimited`: count the compute ceiling beside pods without a compute limit
        (`--unlimited-neighbours=count`, for nodes without the compute arbiter); False (the
        default) ignores them: under the arbiter they are best effort and limits add up to
        100 per GPU."""
        self.count_unlimited = count_unlimited
        self.lock = threading.RLock()
        self.nodes: dict[str, NodeState] = {}
        self.pods: dict[str, PodRecord] = {}
        self.by_name: dict[tuple[str, str], str] = {}
        self._assumed: dict[str, str] = {}  # uid -> node of an unconfirmed assumption
        self._assume_lock = threading.Lock()

    # --- nodes -------------------------------------------------------------------------
    def _node(self, name: str) -> NodeState:
        node = self.nodes.get(name)
        if node is None:
            with self.lock:
                node = self.nodes.setdefault(
                    name, NodeState(name, count_unlimited=self.count_unlimited)
                )
        return node

    def observe_node(self, obj: dict[str, Any]) -> None:
        """A node was added or changed."""
        name = (obj.get("metadata") or {}).get("name", "")
        if not name:
            return
        node = self._node(name)
        with node.lock:
            node.gpus = node_gpus(obj)
            node.known = True
            node.ip = _node_ip(obj)
            node.refresh()

    def forget_node(self, name: str) -> None:
        """A node was deleted: it takes nothing more (its holdings stay until their pods go)."""
        node = self.nodes.get(name)
        if node is None:
            return
        with node.lock:
            node.known = False
            node.refresh()

    def replace_nodes(self, items: Iterable[dict[str, Any]]) -> None:
        """A full node list (after a re-list): nodes absent from it are forgotten."""
        seen = set()
        for obj in items:
            self.observe_node(obj)
            seen.add((obj.get("metadata") or {}).get("name", ""))
        for name in list(self.nodes):
            if name not in seen:
                self.forget_node(name)

    # --- pods ----------------------------------------------------------------------------
    def observe_pod(self, obj: dict[str, Any]) -> None:
        """A pod was added or changed; pods asking for no GPU memory or compute are ignored."""
        self._observe_pod(obj, None)

    def _observe_pod(self, obj: dict[str, Any], stale: set[str] | None) -> None:
        """observe_pod; with `stale`, the nodes whose holdings changed are added to it and
        their views are left for the caller to refresh."""
        meta = obj.get("metadata") or {}
        uid = meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"
        read = contract(obj)
        try:
            units = container_units(read)
            compute = _pod_compute(read)
        except SpecError:
            units, compute = [], 0  # malformed: the scheduler cannot place it; holds nothing
        if sum(units) <= 0 and compute <= 0:
            self.forget_pod(uid)
            return
        spec = obj.get("spec") or {}
        record = PodRecord(
            uid=uid,
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            node=spec.get("nodeName") or "",
            phase=(obj.get("status") or {}).get("phase") or "",
            deleting=bool(meta.get("deletionTimestamp")),
            resource_version=str(meta.get("resourceVersion", "")),
            raw=None if spec.get("nodeName") else {"metadata": meta, "spec": spec},
        )
        with self.lock:
            old = self.pods.get(uid)
            if old is not None and old.node and old.node != record.node:
                self._release(old.node, uid, confirmed_too=True)
            if not record.active:
                self._drop_record(uid)
                if old is not None and old.node:
                    self._release(old.node, uid, confirmed_too=True)
                self._release_assumed(uid)
                return
            self.pods[uid] = record
            self.by_name[(record.namespace, record.name)] = uid
            if record.node:
                node = self._node(record.node)
                with node.lock:
                    node.holdings[uid] = _holding_of(read, units, compute)
                    if stale is None:
                        node.refresh()
                if stale is not None:
                    stale.add(record.node)
                self._confirm(uid, record.node)

    def forget_pod(self, uid: str) -> None:
        """A pod was deleted (or stopped asking for GPU memory)."""
        with self.lock:
            old = self.pods.get(uid)
            self._drop_record(uid)
            if old is not None and old.node:
                self._release(old.node, uid, confirmed_too=True)
            self._release_assumed(uid)

    def replace_pods(self, items: Iterable[dict[str, Any]], offline: bool = False) -> None:
        """A full pod list (after a re-list): pods absent from it are forgotten.

        `offline`: nothing reads the state until this returns (the first list, before the
        extender is ready), so each node's view is computed once at the end, not per pod.
        """
        seen = set()
        stale: set[str] | None = set() if offline else None
        try:
            for obj in items:
                meta = obj.get("metadata") or {}
                seen.add(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
                self._observe_pod(obj, stale)
            for uid in list(self.pods):
                if uid not in seen:
                    self.forget_pod(uid)
        finally:  # a list that failed half-way leaves no view behind its holdings
            for name in stale or ():
                node = self.nodes[name]
                with node.lock:
                    node.refresh()

    def _drop_record(self, uid: str) -> None:
        old = self.pods.pop(uid, None)
        if old is not None and self.by_name.get((old.namespace, old.name)) == uid:
            del self.by_name[(old.namespace, old.name)]

    def _release(self, node_name: str, uid: str, confirmed_too: bool) -> None:
        node = self.nodes.get(node_name)
        if node is None:
            return
        with node.lock:
            holding = node.holdings.get(uid)
            if holding is not None and (confirmed_too or holding.assumed):
                del node.holdings[uid]
                node.refresh()

    def _confirm(self, uid: str, node_name: str) -> None:
        """The watch shows the pod bound: an assumption elsewhere is void."""
        with self._assume_lock:
            assumed_on = self._assumed.pop(uid, None)
        if assumed_on is not None and assumed_on != node_name:
            self._release(assumed_on, uid, confirmed_too=False)

    def _release_assumed(self, uid: str) -> None:
        with self._assume_lock:
            assumed_on = self._assumed.pop(uid, None)
        if assumed_on is not None:
            self._release(assumed_on, uid, confirmed_too=False)

    def pod(self, namespace: str, name: str) -> PodRecord | None:
        """The record of a GPU pod by name, if the watch has shown it."""
        uid = self.by_name.get((namespace, name))
        return self.pods.get(uid) if uid else None

    # --- the assume cache ----------------------------------------------------------------
    def assume(self, node_name: str, uid: str, holding: Holding, timeout: float) -> None:
        """Hold units for a bind in progress (caller holds the node's lock)."""
        holding.assumed = True
        holding.in_flight = True
        holding.deadline = time.monotonic() + timeout
        node = self.nodes[node_name]
        node.holdings[uid] = holding
        node.refresh()
        with self._assume_lock:
            self._assumed[uid] = node_name

    def settle(self, node_name: str, uid: str, bound: bool, timeout: float) -> None:
        """A bind finished: keep the assumption until the watch confirms it, or drop it."""
        if not bound:
            with self._assume_lock:
                if self._assumed.get(uid) == node_name:
                    del self._assumed[uid]
            self._release(node_name, uid, confirmed_too=False)
            return
        node = self.nodes[node_name]
        with node.lock:
            holding = node.holdings.get(uid)
            if holding is not None and holding.assumed:
                holding.in_flight = False
                holding.deadline = time.monotonic() + timeout

    def expire(self, now: float | None = None) -> int:
        """Drop assumptions past their deadline (not confirmed by the watch); how many."""
        now = time.monotonic() if now is None else now
        dropped = 0
        for node in list(self.nodes.values()):
            with node.lock:
                stale = [
                    uid
                    for uid, h in node.holdings.items()
                    if h.assumed and not h.in_flight and h.deadline <= now
                ]
                for uid in stale:
                    del node.holdings[uid]
                if stale:
                    node.refresh()
            with self._assume_lock:
                for uid in stale:
                    if self._assumed.get(uid) == node.name:
                        del self._assumed[uid]
            dropped += len(stale)
        return dropped

    def assumed_count(self) -> int:
        with self._assume_lock:
            return len(self._assumed)

    # --- reports ---------------------------------------------------------------------------
    def inspect(self, only: str | None = None) -> dict[str, Any]:
        """gpushare's inspect JSON: nodes, their devices, and the pods on each device. A device
        with pods without a compute limit, when the ceiling is counted, also shows how many
        (`unlimitedPods`) and the compute its compute-limited pods get together
        (`computeCeiling`)."""
        names = [only] if only else sorted(self.nodes)
        nodes = []
        for name in names:
            node = self.nodes.get(name)
            if node is None or not node.known or node.gpus.error:
                continue
            with node.lock:
                holdings = sorted(node.holdings.values(), key=lambda h: (h.namespace, h.name))
                view = node.view
            devs = []
            compute = bool(view.compute_per_gpu)
            for gpu, free in enumerate(view.free):
                pods = []
                for h in holdings:
                    if gpu in h.gpus:
                        pod = {"name": h.name, "namespace": h.namespace, "usedGPU": h.per_gpu}
                        if compute:
                            pod["usedCompute"] = h.compute
                        pods.append(pod)
                dev = {
                    "id": gpu,
                    "totalGPU": view.per_gpu,
                    "usedGPU": view.per_gpu - free,
                    "pods": pods,
                }
                if compute:
                    dev["totalCompute"] = view.compute_per_gpu
                    dev["usedCompute"] = view.compute_per_gpu - view.compute_left(gpu)
                if view.unlimited_on(gpu):
                    dev["unlimitedPods"] = view.unlimited_on(gpu)
                    dev["computeCeiling"] = view.ceiling(gpu)
                devs.append(dev)
            entry = {
                "name": name,
                "totalGPU": view.capacity,
                "usedGPU": sum(d["usedGPU"] for d in devs),
                "pendingGPU": view.unplaced,
                "devs": devs,
            }
            if compute:
                entry["totalCompute"] = view.compute_capacity
                entry["usedCompute"] = sum(d["usedCompute"] for d in devs)
                entry["pendingCompute"] = view.compute_unplaced
            nodes.append(entry)
        return {"nodes": nodes}
