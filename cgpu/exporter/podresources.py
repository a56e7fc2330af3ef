"""The kubelet's pod-resources API (v1 List): which pod and container hold which device IDs.

The protobuf messages come from the device plugin's generated stubs (`deviceplugin.api`), imported
lazily. Without them, without the socket, or while the kubelet does not answer, the exporter falls
back to the labels in meta.json; this module then returns an empty mapping and never raises.
"""

from __future__ import annotations

import importlib
import logging
import os
import time
from collections.abc import Callable, Collection, Mapping
from types import ModuleType
from typing import Any

from cgpu.exporter.labels import Identity

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"
# Module names the device plugin's generated v1 messages may have; the first that imports wins.
MESSAGE_MODULES = (
    "deviceplugin.api.podresources_pb2",
    "deviceplugin.api.podresources_v1_pb2",
    "deviceplugin.api.podresources.v1.api_pb2",
    "deviceplugin.api.podresources.api_pb2",
)
_MAX_MESSAGE = 16 * 1024 * 1024  # the kubelet's own client limit for this API

Lister = Callable[[float], Any]  # timeout -> ListPodResourcesResponse


def load_messages() -> ModuleType | None:
    """The generated pod-resources v1 message module, or None when it is not installed."""
    for name in MESSAGE_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "ListPodResourcesRequest"):
            return module
    return None


def index_devices(response: Any) -> dict[str, Identity]:
    """{device_id: Identity} from a ListPodResourcesResponse, over every resource."""
    out: dict[str, Identity] = {}
    for pod in response.pod_resources:
        for ctr in pod.containers:
            ident = Identity(pod.namespace, pod.name, ctr.name)
            for dev in ctr.devices:
                for device_id in dev.device_ids:
                    out[device_id] = ident
    return out


class PodResourcesSource:
    """A cached view of the kubelet's device assignments, refreshed when it misses a device."""

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        timeout: float = 1.0,
        ttl: float = 10.0,
        min_refresh: float = 1.0,
        retry_interval: float = 10.0,
        lister: Lister | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._socket = socket_path
        self._timeout = timeout
        self._ttl = ttl
        self._min_refresh = min_refresh
        self._retry_interval = retry_interval
        self._lister = lister
        self._clock = clock
        self._channel: Any = None
        self._index: dict[str, Identity] = {}
        self._fetched = -float("inf")
        self._next_try = -float("inf")
        self._up = False

    @property
    def up(self) -> bool:
        """Whether the last attempt to reach the kubelet succeeded."""
        return self._up

    def devices(self, wanted: Collection[str] = ()) -> Mapping[str, Identity]:
        """{device_id: Identity}; refetched when stale or when a wanted ID is missing."""
        now = self._clock()
        stale = now - self._fetched >= self._ttl
        missing = any(w not in self._index for w in wanted)
        if (
            stale or (missing and now - self._fetched >= self._min_refresh)
        ) and now >= self._next_try:
            self._fetch(now)
        return self._index

    def close(self) -> None:
        """Close the gRPC channel."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def _fetch(self, now: float) -> None:
        try:
            lister = self._lister or self._grpc_lister()
            if lister is None:
                raise RuntimeError("pod-resources unavailable")
            self._index = index_devices(lister(self._timeout))
            self._fetched = now
            if not self._up:
                log.info("pod-resources API up at %s", self._socket)
            self._up = True
        except Exception as exc:  # grpc.RpcError, missing stubs or socket
            if self._up:
                log.warning("pod-resources API down (%s); labels from meta.json", exc)
            self._up = False
            self._index = {}
            self._next_try = now + self._retry_interval
            self.close()

    def _grpc_lister(self) -> Lister | None:
        if not os.path.exists(self._socket):
            return None
        messages = load_messages()
        if messages is None:
            return None
        if self._channel is None:
            import grpc

            self._channel = grpc.insecure_channel(
                f"unix://{os.path.abspath(self._socket)}",
                options=[("grpc.max_receive_message_length", _MAX_MESSAGE)],
            )
        call = self._channel.unary_unary(
            LIST_METHOD,
            request_serializer=messages.ListPodResourcesRequest.SerializeToString,
            response_deserializer=messages.ListPodResourcesResponse.FromString,
        )
        return lambda timeout: call(messages.ListPodResourcesRequest(), timeout=timeout)
