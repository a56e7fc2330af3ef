"""scheduleOne as kube-scheduler runs it with one HTTPExtender (k8s.io/kubernetes extender.go).

Written from kube-scheduler's extender semantics, on top of SchedulerPeer's wire calls:
- IsInterested: the extender is called only for pods whose containers or init containers name
  a managed resource in requests or limits; other pods never reach it;
- NodeResourcesFit first (`ignoredByScheduler: false`): a node must have the pod's total
  aliyun.com/gpu-mem (and CPU) free by the sum of the requests of the pods bound to it;
- filter with NodeNames (nodeCacheCapable). An error answer, or a non-200 status, fails the
  cycle unless the extender is `ignorable`. FailedAndUnresolvableNodes and FailedNodes are
  both removed; a node in both counts as unresolvable;
- with one feasible node, no scoring (schedulePod returns it at once); otherwise each node's
  framework score (LeastAllocated CPU, 0..100) plus extender score x weight x
  (MaxNodeScore 100 / MaxExtenderPriority 10), the highest winning, ties broken at random;
- bind is delegated to the extender (bindVerb set) for pods it is interested in; other pods
  are bound by the default binder: a POST of pods/<name>/binding to the API server.
"""

from __future__ import annotations

import json
import random
import urllib.error
from dataclasses import dataclass, field
from typing import Any

from kube.apiserver import FakeApiServer
from sched_peer import MANAGED, Decision, SchedulerPeer, post

MAX_NODE_SCORE = 100
MAX_EXTENDER_PRIORITY = 10
Obj = dict[str, Any]


def _quantity(resources: Obj, name: str) -> int:
    """A container's request for `name` (limits stand in, as the API server defaults them)."""
    for part in ("requests", "limits"):
        value = (resources.get(part) or {}).get(name)
        if value is not None:
            return _millicpu(str(value)) if name == "cpu" else int(value)
    return 0


def _millicpu(value: str) -> int:
    return int(value[:-1]) if value.endswith("m") else int(float(value) * 1000)


def pod_request(pod: Obj, name: str) -> int:
    """The pod's effective request: max(sum of containers, largest init container)."""
    spec = pod.get("spec") or {}
    regular = sum(_quantity(c.get("resources") or {}, name) for c in spec.get("containers", []))
    init = [_quantity(c.get("resources") or {}, name) for c in spec.get("initContainers", [])]
    return max([regular, *init])


def is_interested(pod: Obj, managed: tuple[str, ...]) -> bool:
    """HTTPExtender.IsInterested: any container or init container names a managed resource."""
    spec = pod.get("spec") or {}
    for container in [*spec.get("containers", []), *spec.get("initContainers", [])]:
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            if any(name in managed for name in resources.get(part) or {}):
                return True
    return False


@dataclass
class Calls:
    """What reached the extender, by verb: pod names."""

    filter: list[str] = field(default_factory=list)
    prioritize: list[str] = field(default_factory=list)
    bind: list[str] = field(default_factory=list)


class KubeScheduler(SchedulerPeer):
    """One kube-scheduler with the extender configured as deploy/scheduler configures it."""

    def __init__(
        self,
        api: FakeApiServer,
        url: str,
        weight: int = 10,
        ignorable: bool = False,
        managed: tuple[str, ...] = (MANAGED,),
        seed: int = 0,
    ) -> None:
        super().__init__(api, url, node_cache_capable=True)
        self.weight = weight
        self.ignorable = ignorable
        self.managed = managed
        self.random = random.Random(seed)
        self.calls = Calls()

    # --- the extender's verbs, recorded ------------------------------------------------
    def filter(self, pod: Obj, nodes: list[str]) -> Obj:
        self.calls.filter.append(pod["metadata"]["name"])
        return super().filter(pod, nodes)

    def prioritize(self, pod: Obj, nodes: list[str]) -> dict[str, int]:
        self.calls.prioritize.append(pod["metadata"]["name"])
        return super().prioritize(pod, nodes)

    def bind(self, pod: Obj, node: str) -> str:
        self.calls.bind.append(pod["metadata"]["name"])
        return super().bind(pod, node)

    # --- kube-scheduler's own parts ----------------------------------------------------
    def _free(self) -> dict[str, dict[str, int]]:
        """Each node's allocatable minus what the pods bound to it request."""
        free: dict[str, dict[str, int]] = {}
        for node in self.api.store.snapshot("nodes")[0]:
            alloc = node["status"]["allocatable"]
            free[node["metadata"]["name"]] = {
                MANAGED: int(alloc.get(MANAGED, "0")),
                "cpu": _millicpu(str(alloc.get("cpu", "0"))),
            }
        for pod in self.api.pods():
            node_name = (pod.get("spec") or {}).get("nodeName")
            phase = (pod.get("status") or {}).get("phase")
            if node_name in free and phase not in ("Succeeded", "Failed"):
                for name in (MANAGED, "cpu"):
                    free[node_name][name] -= pod_request(pod, name)
        return free

    def _default_bind(self, pod: Obj, node: str) -> str:
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding"
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": meta["name"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}  # fmt: skip
        status, reply = post(f"{self.api.url}{path}", body)
        return "" if status == 201 else json.dumps(reply)

    def schedule_one(self, namespace: str, name: str) -> Decision:
        """One scheduling cycle for a pending pod; binds it when a node is found."""
        pod = self.api.get("pods", name, namespace)
        free = self._free()
        wants = {res: pod_request(pod, res) for res in (MANAGED, "cpu")}
        feasible = sorted(n for n, left in free.items() if all(left[r] >= wants[r] for r in wants))
        failed = {n: "Insufficient resources" for n in free if n not in feasible}
        interested = is_interested(pod, self.managed)
        if interested and feasible:
            try:
                result = self.filter(pod, feasible)
            except (AssertionError, OSError, urllib.error.URLError) as err:
                result = {"Error": f"extender filter failed: {err}"}
            if result.get("Error") and not self.ignorable:
                return Decision(None, failed, result["Error"])
            if not result.get("Error"):
                feasible = list(result.get("NodeNames") or [])
                unresolvable = result.get("FailedAndUnresolvableNodes") or {}
                failed.update(result.get("FailedNodes") or {})
                failed.update(unresolvable)  # a node in both is unresolvable
        if not feasible:
            return Decision(None, failed)
        best = feasible[0] if len(feasible) == 1 else self._select(pod, feasible, free, interested)
        error = self.bind(pod, best) if interested else self._default_bind(pod, best)
        return Decision(None if error else best, failed, error)

    def _select(
        self, pod: Obj, nodes: list[str], free: dict[str, dict[str, int]], interested: bool
    ) -> str:
        totals = {}
        for node in nodes:
            alloc = _millicpu(
                str(self.api.get("nodes", node)["status"]["allocatable"].get("cpu", "0"))
            )
            left = free[node]["cpu"] - pod_request(pod, "cpu")
            totals[node] = (left * MAX_NODE_SCORE // alloc) if alloc else 0
        if interested:
            try:
                scores = self.prioritize(pod, nodes)
            except (AssertionError, OSError, urllib.error.URLError):
                scores = {}  # kube-scheduler ignores a failed prioritize: no extender score
            for node in nodes:
                extra = scores.get(node, 0) * self.weight
                totals[node] += extra * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
        top = max(totals.values())
        return self.random.choice([n for n in nodes if totals[n] == top])
