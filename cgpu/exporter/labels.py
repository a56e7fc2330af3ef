"""Which pod and container a container directory belongs to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cgpu.core.layout import CRI_LABEL_ANNOTATIONS


@dataclass(frozen=True)
class Identity:
    """The Kubernetes names of one container; empty strings where unknown. A DRA claim's
    directory also names its claim (its containers, and pods, comma separated)."""

    namespace: str
    pod: str
    container: str
    claim: str = ""


def _text(meta: Mapping[str, Any], name: str) -> str:
    value = meta.get(name)
    return value if isinstance(value, str) else ""


def identity_from_meta(key: str, meta: Mapping[str, Any]) -> Identity:
    """Labels recorded in meta.json (fields, else CRI annotations); the key if no container name."""
    annotations = meta.get("annotations")
    if not isinstance(annotations, Mapping):
        annotations = {}

    def label(name: str) -> str:
        return _text(meta, name) or next(
            (v for k in CRI_LABEL_ANNOTATIONS[name] if (v := _text(annotations, k))), ""
        )

    return Identity(
        label("namespace"), label("pod"), label("container") or key, _text(meta, "claim")
    )


def device_ids(meta: Mapping[str, Any]) -> list[str]:
    """The device IDs recorded for the container (may be empty): the device plugin's, or the
    DRA claim's CDI device name."""
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
