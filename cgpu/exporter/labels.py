"""Which pod and container a container directory belongs to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# CRI annotations (CRI-O/dockershim names, then containerd's), as the hook may record them.
_ANNOTATIONS = (
    ("io.kubernetes.pod.namespace", "io.kubernetes.pod.name", "io.kubernetes.container.name"),
    (
        "io.kubernetes.cri.sandbox-namespace",
        "io.kubernetes.cri.sandbox-name",
        "io.kubernetes.cri.container-name",
    ),
)


@dataclass(frozen=True)
class Identity:
    """The Kubernetes names of one container; empty strings where unknown."""

    namespace: str
    pod: str
    container: str


def _text(meta: Mapping[str, Any], name: str) -> str:
    value = meta.get(name)
    return value if isinstance(value, str) else ""


def identity_from_meta(key: str, meta: Mapping[str, Any]) -> Identity:
    """Labels recorded in meta.json; the container key stands in for a missing container name."""
    namespace, pod, container = (_text(meta, n) for n in ("namespace", "pod", "container"))
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping):
        for ns_key, pod_key, ctr_key in _ANNOTATIONS:
            namespace = namespace or _text(annotations, ns_key)
            pod = pod or _text(annotations, pod_key)
            container = container or _text(annotations, ctr_key)
    return Identity(namespace, pod, container or key)


def device_ids(meta: Mapping[str, Any]) -> list[str]:
    """The device-plugin device IDs recorded for the container (may be empty)."""
    ids = meta.get("device_ids")
    if not isinstance(ids, list):
        return []
    return [i for i in ids if isinstance(i, str)]


def resolve(key: str, meta: Mapping[str, Any], by_device: Mapping[str, Identity]) -> Identity:
    """Pod-resources first (matching any recorded device ID), then meta.json, then the key."""
    for device_id in device_ids(meta):
        found = by_device.get(device_id)
        if found is not None:
            return found
    return identity_from_meta(key, meta)
