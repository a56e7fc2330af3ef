"""The kubelet's ContainerAllocateResponse for one container, from a policy's Allocation.

Every container gets the shim, its ld.so.preload and its container directory
(`cgpu.core.injection`), the injection's variables, and the annotation naming its directory;
the policy adds its own variables and mounts (gpushare's or Volcano's, MPS's).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from cgpu.core import injection
from cgpu.core.layout import KEY_ANNOTATION
from cgpu.deviceplugin.api import deviceplugin_v1beta1_pb2 as api
from cgpu.deviceplugin.rm.policy import Allocation


def kubelet_mounts(mounts: Iterable[injection.Mount]) -> list[api.Mount]:
    """Mounts as the kubelet takes them."""
    return [
        api.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
        for m in mounts
    ]


class ResponseBuilder:
    """Renders allocations with the host's copy of the shim and its ld.so.preload."""

    def __init__(self, shim: Path, preload: Path) -> None:
        self.shim = shim
        self.preload = preload

    def build(self, allocation: Allocation) -> api.ContainerAllocateResponse:
        """The response for one container."""
        mounts = injection.container_mounts(self.shim, self.preload, allocation.directory)
        return api.ContainerAllocateResponse(
            envs={**allocation.env, **injection.environment()},
            mounts=kubelet_mounts([*mounts, *allocation.mounts]),
            annotations={KEY_ANNOTATION: allocation.key},
        )
