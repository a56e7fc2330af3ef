"""A device-plugin container directory: its key, its meta.json fields, and making one."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc

from cgpu.core.containers import create_container_dir
from cgpu.core.layout import SOURCE_DEVICE_PLUGIN
from cgpu.deviceplugin.errors import AllocationError
from cgpu.deviceplugin.kube.pods import ContainerRequest, PodInfo
from cgpu.deviceplugin.rm.placement import Placement

Match = tuple[PodInfo, ContainerRequest]  # the pod container an Allocate call is for


def new_key() -> str:
    """A fresh container key: `dp-<unix time>-<12 hex digits>`."""
    return f"dp-{int(time.time())}-{secrets.token_hex(6)}"


def pod_meta(match: Match | None) -> dict[str, Any]:
    """The meta.json fields naming the container's pod, when it is known."""
    if match is None:
        return {}
    pod, container = match
    return {
        "namespace": pod.namespace,
        "pod": pod.name,
        "pod_uid": pod.uid,
        "container": container.name,
    }


def placement_meta(
    resource: str, unit_bytes: int, ids: Sequence[str], placed: Placement, match: Match | None
) -> dict[str, Any]:
    """meta.json of a container given memory units on `placed`'s GPUs."""
    return {
        "source": SOURCE_DEVICE_PLUGIN,
        "device_ids": list(ids),
        "resource": resource,
        "unit_bytes": unit_bytes,
        "units_per_gpu": placed.units_per_gpu,
        "gpu_uuids": [g.gpu.uuid for g in placed.gpus],
        "gpu_indexes": [g.gpu.index for g in placed.gpus],
        **pod_meta(match),
    }


def make_directory(
    state_dir: Path, limits: dict[str, int], meta: dict[str, Any], contexts: Mapping[str, int]
) -> tuple[str, Path]:
    """A new container directory with these slices: (key, path); AllocationError (INTERNAL)
    when it cannot be made."""
    key = new_key()
    try:
        return key, create_container_dir(state_dir, key, limits, meta, contexts=dict(contexts))
    except Exception as err:
        raise AllocationError(
            grpc.StatusCode.INTERNAL, f"cannot create the container directory: {err}"
        ) from err
