"""Registering with the kubelet, and noticing when it restarts."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import grpc

from cgpu.core.layout import KUBELET_SOCKET
from cgpu.deviceplugin.api import deviceplugin_v1beta1_pb2 as api
from cgpu.deviceplugin.api import deviceplugin_v1beta1_pb2_grpc as api_grpc

API_VERSION = "v1beta1"

__all__ = [
    "API_VERSION",
    "KUBELET_SOCKET",
    "FileStamp",
    "register",
    "socket_name",
    "stamp",
]


def socket_name(resource: str) -> str:
    """The plugin's socket file name for a resource: aliyun.com/gpu-mem -> cgpu-gpu-mem.sock."""
    tail = resource.rsplit("/", 1)[-1]
    return "cgpu-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in tail) + ".sock"


def register(kubelet_socket: Path, endpoint: str, resource: str, timeout: float = 5.0) -> None:
    """Register the plugin's socket (`endpoint`, a file name) for `resource`."""
    with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        api_grpc.RegistrationStub(channel).Register(
            api.RegisterRequest(
                version=API_VERSION,
                endpoint=endpoint,
                resource_name=resource,
                options=api.DevicePluginOptions(
                    pre_start_required=False, get_preferred_allocation_available=True
                ),
            ),
            timeout=timeout,
        )


@dataclass(frozen=True)
class FileStamp:
    """What tells one incarnation of a socket file from the next."""

    device: int
    inode: int
    ctime_ns: int


def stamp(path: Path) -> FileStamp | None:
    """The socket's stamp (device, inode, ctime), or None when it does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return FileStamp(st.st_dev, st.st_ino, st.st_ctime_ns)
