"""Pod and container names from the kubelet's pod-resources API, cached between scrapes.

Device-plugin containers are found by their device IDs; DRA claims (driver gpu.cgpu.io) by the
CDI device name of the claim, which the kubelet reports among each container's dynamic
resources.

The gRPC client is `cgpu.core.podresources` (the device plugin's clean-up uses it too), imported
when first needed. Without the socket, or while the kubelet does not answer, this returns an
empty mapping and never raises; the exporter then takes labels from meta.json.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Collection, Iterable, Mapping

from cgpu.core.layout import DRA_DRIVER, GPU_MEM, POD_RESOURCES_SOCKET
from cgpu.exporter.labels import Identity

log = logging.getLogger(__name__)

Lister = Callable[[], Mapping[str, Identity]]  # {device_id: Identity}; raises when unreachable


def kubelet_lister(socket_path: str, resource: str, timeout: float) -> Lister:
    """A lister over the kubelet socket through the device plugin's pod-resources client."""

    def list_devices() -> Mapping[str, Identity]:
        if not os.path.exists(socket_path):
            raise FileNotFoundError(f"no pod-resources socket at {socket_path}")
        from cgpu.core.podresources import PodResources, claims_in, owners_in

        reply = PodResources(socket_path, resource, timeout=timeout).listing()
        if reply is None:
            raise ConnectionError(f"pod-resources List failed on {socket_path}")
        owners, _ = owners_in(reply, resource)
        index = {
            device_id: Identity(namespace, pod, container)
            for (namespace, pod, container), ids in owners.items()
            for device_id in ids
        }
        for cdi_name, users in claims_in(reply, DRA_DRIVER).items():
            index[cdi_name] = Identity(
                users[0].namespace,
                _joined(u.pod for u in users),
                _joined(u.container for u in users),
                users[0].claim,
            )
        return index

    return list_devices


def _joined(names: Iterable[str]) -> str:
    """Distinct names, sorted, comma separated (a claim several containers share)."""
    return ",".join(sorted(set(names)))


class PodResourcesSource:
    """A cached view of the kubelet's device assignments, refetched when it misses a device."""

    def __init__(
        self,
        socket_path: str = POD_RESOURCES_SOCKET,
        resource: str = GPU_MEM,
        timeout: float = 1.0,
        ttl: float = 10.0,
        min_refresh: float = 1.0,
        retry_interval: float = 10.0,
        lister: Lister | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lister = lister or kubelet_lister(socket_path, resource, timeout)
        self._ttl = ttl
        self._min_refresh = min_refresh
        self._retry_interval = retry_interval
        self._clock = clock
        self._index: Mapping[str, Identity] = {}
        self._fetched = -float("inf")
        self._next_try = -float("inf")
        self._up = False

    @property
    def up(self) -> bool:
        """Whether the last attempt to reach the kubelet succeeded."""
        return self._up

    def devices(self, wanted: Collection[str] = ()) -> Mapping[str, Identity]:
        """{device_id: Identity}; refetched when older than the TTL or missing a wanted ID."""
        now = self._clock()
        if now < self._next_try:
            return self._index
        age = now - self._fetched
        missing = age >= self._min_refresh and any(w not in self._index for w in wanted)
        if age >= self._ttl or missing:
            self._fetch(now)
        return self._index

    def _fetch(self, now: float) -> None:
        try:
            self._index = self._lister()
        except Exception as exc:  # ImportError, grpc errors, a missing socket
            if self._up or self._fetched == -float("inf"):
                log.info("pod-resources unavailable (%s); labels from meta.json", exc)
            self._up = False
            self._index = {}
            self._fetched = now
            self._next_try = now + self._retry_interval
            return
        if not self._up:
            log.info("pod-resources API answering")
        self._up = True
        self._fetched = now
