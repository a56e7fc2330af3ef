"""The extender verbs on decoded JSON: filter, prioritize, bind.

JSON keys are the Go field names of k8s.io/kube-scheduler/extender/v1, looked up without regard
to case as Go's encoding/json does. Bad input yields an `Error` (or a FailedNodes reason), never
an exception out of these functions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cgpu.core.layout import GPU_MEM

from .binder import Binder, BindError
from .fit import check, score
from .metrics import Metrics
from .podspec import SpecError, gpu_request
from .state import ClusterState

UNKNOWN_NODE = f"node is unknown to the cgpu extender (no {GPU_MEM} node seen)"
NOT_SYNCED = "the extender has not finished listing the cluster yet; retry"


class NotSynced(Exception):
    """A verb that needs the whole cluster arrived before the first full list."""


class BadRequest(ValueError):
    """A body that is not the ExtenderArgs / ExtenderBindingArgs it should be."""


def field(obj: Any, name: str) -> Any:
    """`obj[name]`, matching the key case-insensitively (Go's decoder does)."""
    if not isinstance(obj, dict):
        raise BadRequest(f"expected a JSON object, got {type(obj).__name__}")
    if name in obj:
        return obj[name]
    lower = name.lower()
    for key, value in obj.items():
        if key.lower() == lower:
            return value
    return None


def _candidates(args: Any) -> tuple[list[str], list[dict[str, Any]] | None, dict[str, Any]]:
    """Node names, the node objects when sent (nodeCacheCapable: false), and the NodeList."""
    names = field(args, "NodeNames")
    nodes = field(args, "Nodes")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadRequest("NodeNames must be a list of strings")
        return names, None, {}
    if nodes is not None:
        if not isinstance(nodes, dict) or not isinstance(nodes.get("items") or [], list):
            raise BadRequest("Nodes must be a NodeList with items")
        items = [n for n in nodes.get("items") or [] if isinstance(n, dict)]
        if len(items) != len(nodes.get("items") or []):
            raise BadRequest("Nodes.items must be node objects")
        out = [str((n.get("metadata") or {}).get("name", "")) for n in items]
        return out, items, nodes
    raise BadRequest("ExtenderArgs has neither NodeNames nor Nodes")


def _pod(args: Any) -> dict[str, Any]:
    pod = field(args, "Pod")
    if not isinstance(pod, dict):
        raise BadRequest("ExtenderArgs.Pod must be a pod object")
    return pod


class Handlers:
    """Filter, prioritize and bind against one ClusterState."""

    def __init__(
        self,
        state: ClusterState,
        binder: Binder,
        metrics: Metrics,
        node_policy: str = "binpack",
        gpu_policy: str = "binpack",
        synced: Callable[[], bool] = lambda: True,
    ) -> None:
        self.state = state
        self.binder = binder
        self.metrics = metrics
        self.node_policy = node_policy
        self.gpu_policy = gpu_policy
        self.synced = synced

    def filter(self, args: Any) -> dict[str, Any]:
        """ExtenderArgs -> ExtenderFilterResult."""
        result: dict[str, Any] = {
            "Nodes": None,
            "NodeNames": None,
            "FailedNodes": {},
            "FailedAndUnresolvableNodes": {},
            "Error": "",
        }
        try:
            pod = _pod(args)
            names, objects, node_list = _candidates(args)
        except BadRequest as err:
            self.metrics.bad_requests.labels("filter").inc()
            result["Error"] = str(err)
            return result
        passed: list[str] = []
        failed: dict[str, str] = result["FailedNodes"]
        unresolvable: dict[str, str] = result["FailedAndUnresolvableNodes"]
        try:
            request = gpu_request(pod)
        except SpecError as err:
            unresolvable.update(dict.fromkeys(names, str(err)))
            request = None
        if request is not None and not request.wants_gpu:
            passed = list(names)
        elif request is not None:
            if not self.synced():
                result["Error"] = NOT_SYNCED
                return result
            nodes = self.state.nodes
            for name in names:
                node = nodes.get(name)
                if node is None:
                    failed[name] = UNKNOWN_NODE
                    continue
                verdict = check(node.view, request)
                if verdict.fits:
                    passed.append(name)
                elif verdict.permanent:
                    unresolvable[name] = verdict.reason
                else:
                    failed[name] = verdict.reason
        self.metrics.filtered.labels("fit").inc(len(passed))
        self.metrics.filtered.labels("failed").inc(len(failed))
        self.metrics.filtered.labels("unresolvable").inc(len(unresolvable))
        if objects is None:
            result["NodeNames"] = passed
        else:
            keep = set(passed)
            items = [n for n in objects if (n.get("metadata") or {}).get("name") in keep]
            result["Nodes"] = {**node_list, "items": items}
        return result

    def prioritize(self, args: Any) -> list[dict[str, Any]]:
        """ExtenderArgs -> HostPriorityList (0..10). Raises BadRequest on a malformed body,
        NotSynced for a GPU pod before the first full list (scores from part of the cluster
        would mislead; kube-scheduler ignores a failed prioritize)."""
        try:
            pod = _pod(args)
            names, _, _ = _candidates(args)
        except BadRequest:
            self.metrics.bad_requests.labels("prioritize").inc()
            raise
        try:
            request = gpu_request(pod)
        except SpecError:
            return [{"Host": name, "Score": 0} for name in names]
        if request.wants_gpu and not self.synced():
            raise NotSynced(NOT_SYNCED)
        node_policy = request.node_policy or self.node_policy
        out = []
        for name in names:
            node = self.state.nodes.get(name)
            value = 0
            if node is not None and request.wants_gpu:
                view = node.view
                if check(view, request).fits:
                    value = score(view, request, node_policy)
            out.append({"Host": name, "Score": value})
        return out

    def bind(self, args: Any) -> dict[str, Any]:
        """ExtenderBindingArgs -> ExtenderBindingResult."""
        try:
            name, namespace = field(args, "PodName"), field(args, "PodNamespace")
            uid, node = field(args, "PodUID") or "", field(args, "Node")
            for key, value in (("PodName", name), ("PodNamespace", namespace), ("Node", node)):
                if not isinstance(value, str) or not value:
                    raise BadRequest(f"ExtenderBindingArgs.{key} must be a non-empty string")
            if not isinstance(uid, str):
                raise BadRequest("ExtenderBindingArgs.PodUID must be a string")
        except BadRequest as err:
            self.metrics.bad_requests.labels("bind").inc()
            self.metrics.bind_failures.labels("bad_request").inc()
            return {"Error": str(err)}
        if not self.synced():
            # The binder would choose GPUs from part of the cluster. kube-scheduler puts a
            # pod whose bind failed back in its queue and tries it again.
            self.metrics.bind_failures.labels("not_synced").inc()
            return {"Error": NOT_SYNCED}
        try:
            self.binder.bind(namespace, name, uid, node)
        except BindError as err:
            self.metrics.bind_failures.labels(err.reason).inc()
            return {"Error": str(err)}
        self.metrics.binds.inc()
        return {"Error": ""}
