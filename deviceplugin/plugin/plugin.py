"""The plugin's life: serve, register, watch the kubelet, re-serve when it restarts."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

from cgpu.core.podresources import Owner, PodResources
from cgpu.deviceplugin.kube.client import KubeClient
from cgpu.deviceplugin.plugin import cleanup, kubelet
from cgpu.deviceplugin.plugin.nodestatus import NodeStatus
from cgpu.deviceplugin.plugin.response import ResponseBuilder
from cgpu.deviceplugin.plugin.server import DevicePluginService, start_server
from cgpu.deviceplugin.rm.health import HealthWatcher
from cgpu.deviceplugin.rm.inventory import Inventory
from cgpu.deviceplugin.rm.policy import AllocationPolicy

log = logging.getLogger(__name__)

POLL = 0.25
REGISTER_RETRY = 0.5
REGISTER_TIMEOUT = 2.0
REGISTER_DEADLINE = 10.0
NODE_RETRY = 30.0


@dataclass(frozen=True)
class Serving:
    """Where the plugin meets the kubelet, and how often it cleans up its state dir."""

    kubelet_dir: Path
    socket_name: str
    resource: str
    state_dir: Path
    cleanup_interval: float
    cleanup_grace: float


@dataclass(frozen=True)
class Endpoint:
    """One resource the plugin serves: its own socket, registration and device list."""

    socket_name: str
    resource: str
    inventory: Inventory
    policy: AllocationPolicy


class Watcher(Protocol):
    """A background health source."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class Plugin:
    """Owns the gRPC servers (one per resource) and the background threads."""

    def __init__(
        self,
        serving: Serving,
        inventory: Inventory,
        policy: AllocationPolicy,
        responses: ResponseBuilder,
        health: HealthWatcher | None,
        pod_resources: PodResources | None,
        kube: KubeClient | None,
        extra: Sequence[Endpoint] = (),
        watchers: Sequence[Watcher] = (),
        extra_pod_resources: Sequence[PodResources] = (),
    ) -> None:
        self.serving = serving
        self.inventory = inventory
        self.policy = policy
        self.responses = responses
        self.health = health
        self.watchers: list[Watcher] = [*([health] if health else []), *watchers]
        self.pod_resources = pod_resources
        self.extra_pod_resources = list(extra_pod_resources)
        self.kube = kube
        self.node = NodeStatus(kube, inventory, serving.resource) if kube else None
        self.stop = threading.Event()
        self.registrations = 0
        main = Endpoint(serving.socket_name, serving.resource, inventory, policy)
        self.endpoints = [main, *extra]

    @property
    def socket_path(self) -> Path:
        return self.serving.kubelet_dir / self.serving.socket_name

    def path(self, endpoint: Endpoint) -> Path:
        """The socket of one endpoint."""
        return self.serving.kubelet_dir / endpoint.socket_name

    @property
    def kubelet_socket(self) -> Path:
        return self.serving.kubelet_dir / kubelet.KUBELET_SOCKET

    def run(self) -> int:
        """Serve until `stop` is set; returns the exit status."""
        for watcher in self.watchers:
            watcher.start()
        cleaner = threading.Thread(target=self._cleanup_loop, name="cleanup", daemon=True)
        cleaner.start()
        if self.node is not None:
            threading.Thread(target=self._node_loop, name="node-status", daemon=True).start()
        try:
            while not self.stop.is_set():
                self._serve_once()
        finally:
            self.inventory.bump()
            for watcher in self.watchers:
                watcher.stop()
            for endpoint in self.endpoints:
                self.path(endpoint).unlink(missing_ok=True)
        return 0

    def _serve_once(self) -> None:
        """Serve and register every resource, then wait until the kubelet restarts, one of
        our sockets disappears, or we are stopped.  Any of these, at any point (registration
        included), ends this round: the next one serves afresh and registers everything."""
        servers, mine = [], {}
        for endpoint in self.endpoints:
            service = DevicePluginService(
                endpoint.inventory, endpoint.policy, self.responses, self.stop
            )
            servers.append(start_server(service, self.path(endpoint)))
            mine[endpoint.socket_name] = kubelet.stamp(self.path(endpoint))
            log.info("serving %s on %s", endpoint.resource, self.path(endpoint))
        try:
            theirs = self._register_all(mine)
            if theirs is None:
                return
            # The kubelet may zero extended capacity when it re-registers its node.
            threading.Thread(target=self._publish_node, daemon=True).start()
            while not self.stop.wait(POLL) and self._unchanged(mine, theirs):
                pass
        finally:
            for server in servers:
                server.stop(grace=0.5).wait(2)

    def _unchanged(
        self, mine: dict[str, kubelet.FileStamp | None], theirs: kubelet.FileStamp | None
    ) -> bool:
        """Whether our sockets and kubelet.sock are the ones this round started with; logs
        what changed."""
        if kubelet.stamp(self.kubelet_socket) != theirs:
            log.warning("kubelet.sock was recreated: the kubelet restarted; re-registering")
            return False
        return self._ours_present(mine)

    def _register_all(self, mine: dict[str, kubelet.FileStamp | None]) -> kubelet.FileStamp | None:
        """Register every resource on one kubelet; returns its socket's stamp, or None
        when stopped, when anything changed meanwhile, or when it took too long (the caller
        then starts over)."""
        theirs = None
        while theirs is None:  # no kubelet yet: wait for one, watching our own sockets
            if self.stop.is_set() or not self._ours_present(mine):
                return None
            theirs = kubelet.stamp(self.kubelet_socket)
            if theirs is None:
                self.stop.wait(POLL)
        deadline = time.monotonic() + REGISTER_DEADLINE
        for endpoint in self.endpoints:
            while not self._register(endpoint):
                if self.stop.is_set() or not self._unchanged(mine, theirs):
                    return None
                if time.monotonic() >= deadline:
                    log.warning(
                        "registration did not complete within %.0f s; serving again",
                        REGISTER_DEADLINE,
                    )
                    return None
                self.stop.wait(REGISTER_RETRY)
            if not self._unchanged(mine, theirs):  # it restarted right after answering
                return None
        return None if self.stop.is_set() else theirs

    def _ours_present(self, mine: dict[str, kubelet.FileStamp | None]) -> bool:
        """Whether each of our sockets is still the one we created."""
        for endpoint in self.endpoints:
            now = kubelet.stamp(self.path(endpoint))
            if now is None or now != mine[endpoint.socket_name]:
                log.warning("our socket %s was removed; serving again", self.path(endpoint))
                return False
        return True

    def _register(self, endpoint: Endpoint) -> bool:
        """One registration of one resource, bounded by REGISTER_TIMEOUT; whether it worked."""
        try:
            kubelet.register(
                self.kubelet_socket, endpoint.socket_name, endpoint.resource, REGISTER_TIMEOUT
            )
        except (grpc.RpcError, grpc.FutureTimeoutError) as err:
            detail = err.details() if isinstance(err, grpc.RpcError) else "timed out"
            log.warning("registration of %s failed: %s; retrying", endpoint.resource, detail)
            return False
        self.registrations += 1
        log.info("registered %s with the kubelet at %s", endpoint.resource, self.kubelet_socket)
        return True

    def _publish_node(self) -> None:
        if self.node is not None:
            self.node.publish(force=True)

    def _node_loop(self) -> None:
        """Republish the node's GPU figures when health changes, and retry failed patches."""
        assert self.node is not None
        seen = self.inventory.version
        while not self.stop.is_set():
            seen = self.inventory.wait_for_change(seen, NODE_RETRY)
            if not self.stop.is_set():
                self.node.publish()

    def cleanup_once(self) -> list[str]:
        """One cleanup pass; nothing is removed when pod-resources cannot be read."""
        if self.pod_resources is None:
            return []
        devices: dict[Owner, set[str]] = {}
        pods: set[tuple[str, str]] = set()
        for source in [self.pod_resources, *self.extra_pod_resources]:
            listing = source.owners()
            if listing is None:
                return []
            for owner, ids in listing[0].items():
                devices.setdefault(owner, set()).update(ids)
            pods |= listing[1]
        return cleanup.sweep(self.serving.state_dir, devices, pods, self.serving.cleanup_grace)

    def _cleanup_loop(self) -> None:
        while not self.stop.wait(self.serving.cleanup_interval):
            try:
                self.cleanup_once()
            except Exception:  # a cleanup bug must not take the plugin down
                log.exception("cleanup pass failed")
