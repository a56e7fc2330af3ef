"""Bind: choose the GPUs, write gpushare's annotations, then create the Binding.

Order and rollback keep two promises: a Binding never exists without the annotations (they are
written first), and a pod this extender did not bind keeps no annotations from it (they are
removed when the Binding fails). Units are held in the assume cache from the choice until the
watch shows the bound pod, so parallel binds never over-commit a GPU.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

from cgpu.core.layout import (
    GPU_MEM_ASSIGNED,
    GPU_MEM_ASSUME_TIME,
    GPU_MEM_DEV,
    GPU_MEM_IDX,
    GPU_MEM_POD,
)

from .fit import place
from .kubeapi import KubeError
from .podspec import (
    GPUSHARE_ANNOTATIONS,
    SpecError,
    gpu_request,
)
from .state import ClusterState, Holding

log = logging.getLogger(__name__)
PATCH_TRIES = 5
ROLLBACK_TRIES = 3


class Api(Protocol):
    """The calls a bind makes (KubeApi provides them)."""

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    def patch_pod(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None: ...


class BindError(Exception):
    """A bind that did not happen; `reason` is a short label for metrics."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class BindResult:
    """Where the pod went (no GPUs for a pod that asks for no GPU memory or compute)."""

    node: str
    gpus: tuple[int, ...]
    per_gpu: int
    compute: int = 0


def annotations_for(gpus: tuple[int, ...], total: int, dev_units: int) -> dict[str, str]:
    """The five gpushare annotations for a pod placed on `gpus`."""
    return {
        GPU_MEM_IDX: ",".join(str(g) for g in gpus),
        GPU_MEM_POD: str(total),
        GPU_MEM_DEV: str(dev_units),
        GPU_MEM_ASSIGNED: "false",
        GPU_MEM_ASSUME_TIME: str(time.time_ns()),
    }


class Binder:
    """Binds pods for the HTTP handler; thread-safe."""

    def __init__(
        self,
        state: ClusterState,
        api: Api,
        gpu_policy: str = "binpack",
        assume_timeout: float = 30.0,
    ) -> None:
        self.state = state
        self.api = api
        self.gpu_policy = gpu_policy
        self.assume_timeout = assume_timeout

    def _fetch(self, namespace: str, name: str, uid: str, node: str) -> dict[str, Any] | None:
        """The pod to bind; None when it is already bound to `node` with its annotations
        (kube-scheduler retried a bind that succeeded: nothing more to do)."""
        record = self.state.pod(namespace, name)
        if record is not None and record.raw is not None and (not uid or record.uid == uid):
            return record.raw
        try:
            pod = self.api.get_pod(namespace, name)
        except KubeError as err:
            reason = "pod_not_found" if err.status == 404 else "api_error"
            raise BindError(str(err), reason) from err
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        done = spec.get("nodeName") == node and GPU_MEM_IDX in (meta.get("annotations") or {})
        if done and (not uid or meta.get("uid") == uid):
            return None
        self._check(pod, namespace, name, uid)
        return pod

    @staticmethod
    def _check(pod: dict[str, Any], namespace: str, name: str, uid: str) -> None:
        meta = pod.get("metadata") or {}
        if uid and meta.get("uid") and meta.get("uid") != uid:
            raise BindError(
                f"pod {namespace}/{name} has uid {meta.get('uid')}, not {uid} (recreated)",
                "uid_mismatch",
            )
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            raise BindError(f"pod {namespace}/{name} is already bound to {bound}", "already_bound")

    def bind(self, namespace: str, name: str, uid: str, node_name: str) -> BindResult:
        """Bind one pod to `node_name`, or raise BindError."""
        pod = self._fetch(namespace, name, uid, node_name)
        if pod is None:
            return BindResult(node_name, (), 0)
        uid = uid or (pod.get("metadata") or {}).get("uid", "")
        try:
            request = gpu_request(pod)
        except SpecError as err:
            raise BindError(f"pod {namespace}/{name}: {err}", "bad_pod") from err
        if not request.wants_gpu:
            self._create_binding(namespace, name, uid, node_name)
            return BindResult(node_name, (), 0)
        node = self.state.nodes.get(node_name)
        if node is None:
            raise BindError(f"node {node_name} is unknown to the extender", "unknown_node")
        policy = request.gpu_policy or self.gpu_policy
        with node.lock:
            verdict = place(node.view, request, policy)
            if not verdict.fits:
                raise BindError(f"node {node_name}: {verdict.reason}", "no_fit")
            holding = Holding(namespace, name, verdict.gpus, request.per_gpu, request.compute)
            self.state.assume(node_name, uid, holding, self.assume_timeout)
            dev_units = node.view.per_gpu
        bound = False
        try:
            notes = annotations_for(verdict.gpus, request.total, dev_units)
            try:
                self._annotate(pod, namespace, name, uid, notes)
            except BindError as err:
                if err.reason not in ("already_bound", "uid_mismatch"):
                    self._roll_back(namespace, name)  # a lost reply may hide an applied patch
                raise
            try:
                self._create_binding(namespace, name, uid, node_name)
            except BindError:
                if self._bound_to(namespace, name, node_name):
                    bound = True  # the Binding was created though its reply was lost
                else:
                    self._roll_back(namespace, name)
                    raise
            bound = True
        finally:
            self.state.settle(node_name, uid, bound, self.assume_timeout)
        return BindResult(node_name, verdict.gpus, request.per_gpu, request.compute)

    def _annotate(
        self, pod: dict[str, Any], namespace: str, name: str, uid: str, notes: dict[str, str]
    ) -> None:
        """Write the annotations, conditional on the pod's resourceVersion; re-read on 409."""
        version = (pod.get("metadata") or {}).get("resourceVersion")
        for _ in range(PATCH_TRIES):
            meta: dict[str, Any] = {"annotations": notes}
            if version:
                meta["resourceVersion"] = version
            try:
                self.api.patch_pod(namespace, name, {"metadata": meta})
                return
            except KubeError as err:
                if err.status != 409:
                    raise BindError(str(err), "patch_failed") from err
            try:
                fresh = self.api.get_pod(namespace, name)
            except KubeError as err:
                raise BindError(str(err), "patch_failed") from err
            self._check(fresh, namespace, name, uid)
            version = (fresh.get("metadata") or {}).get("resourceVersion")
        raise BindError(
            f"pod {namespace}/{name}: annotations conflicted {PATCH_TRIES} times", "conflict"
        )

    def _create_binding(self, namespace: str, name: str, uid: str, node: str) -> None:
        try:
            self.api.bind_pod(namespace, name, uid, node)
        except KubeError as err:
            reason = "already_bound" if err.status == 409 else "binding_failed"
            raise BindError(str(err), reason) from err

    def _bound_to(self, namespace: str, name: str, node: str) -> bool:
        try:
            pod = self.api.get_pod(namespace, name)
        except KubeError:
            return False
        return (pod.get("spec") or {}).get("nodeName") == node

    def _roll_back(self, namespace: str, name: str) -> None:
        """Remove the annotations of a pod whose Binding failed."""
        body = {"metadata": {"annotations": dict.fromkeys(GPUSHARE_ANNOTATIONS)}}
        for attempt in range(ROLLBACK_TRIES):
            try:
                self.api.patch_pod(namespace, name, body)
                return
            except KubeError as err:
                if err.status == 404:
                    return  # the pod is gone, and its annotations with it
                log.warning("roll back annotations of %s/%s: %s", namespace, name, err)
                time.sleep(0.1 * (attempt + 1))
        log.error("could not remove the annotations of %s/%s", namespace, name)
