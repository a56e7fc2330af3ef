"""The plugin's life: serve, register, watch the kubelet, re-serve when it restarts."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc

from cgpu.core.podresources import PodResources
from cgpu.deviceplugin import cleanup, kubelet
from cgpu.deviceplugin.allocator import Allocator
from cgpu.deviceplugin.health import HealthWatcher
from cgpu.deviceplugin.inventory import Inventory
from cgpu.deviceplugin.kube import KubeClient
from cgpu.deviceplugin.nodestatus import NodeStatus
from cgpu.deviceplugin.server import DevicePluginService, start_server

log = logging.getLogger(__name__)

POLL = 0.25
REGISTER_RETRY = 1.0
NODE_RETRY = 30.0


@dataclass(frozen=True)
class Options:
    """How the plugin talks to the kubelet and how often it cleans up."""

    kubelet_dir: Path
    socket_name: str
    resource: str
    cleanup_interval: float
    cleanup_grace: float


class Plugin:
    """Owns the gRPC server and the background threads."""

    def __init__(
        self,
        options: Options,
        inventory: Inventory,
        allocator: Allocator,
        health: HealthWatcher | None,
        pod_resources: PodResources | None,
        kube: KubeClient | None,
    ) -> None:
        self.options = options
        self.inventory = inventory
        self.allocator = allocator
        self.health = health
        self.pod_resources = pod_resources
        self.kube = kube
        self.node = NodeStatus(kube, inventory, options.resource) if kube else None
        self.stop = threading.Event()
        self.registrations = 0

    @property
    def socket_path(self) -> Path:
        return self.options.kubelet_dir / self.options.socket_name

    @property
    def kubelet_socket(self) -> Path:
        return self.options.kubelet_dir / kubelet.KUBELET_SOCKET

    def run(self) -> int:
        """Serve until `stop` is set; returns the exit status."""
        if self.health is not None:
            self.health.start()
        cleaner = threading.Thread(target=self._cleanup_loop, name="cleanup", daemon=True)
        cleaner.start()
        if self.node is not None:
            threading.Thread(target=self._node_loop, name="node-status", daemon=True).start()
        try:
            while not self.stop.is_set():
                self._serve_once()
        finally:
            self.inventory.bump()
            if self.health is not None:
                self.health.stop()
            self.socket_path.unlink(missing_ok=True)
        return 0

    def _serve_once(self) -> None:
        """Serve and register, then wait until the kubelet restarts or we are stopped."""
        service = DevicePluginService(self.inventory, self.allocator, self.stop)
        server = start_server(service, self.socket_path)
        mine = kubelet.identity(self.socket_path)
        log.info("serving %s on %s", self.options.resource, self.socket_path)
        try:
            theirs = self._register()
            while not self.stop.wait(POLL):
                if kubelet.identity(self.kubelet_socket) != theirs:
                    log.warning("kubelet.sock was recreated: the kubelet restarted; re-registering")
                    return
                if kubelet.identity(self.socket_path) != mine:
                    log.warning("our socket %s was removed; serving again", self.socket_path)
                    return
        finally:
            server.stop(grace=0.5).wait(2)

    def _register(self) -> kubelet.FileIdentity | None:
        """Register, retrying until it works; returns the kubelet socket it worked on."""
        while not self.stop.is_set():
            theirs = kubelet.identity(self.kubelet_socket)
            if theirs is not None:
                try:
                    kubelet.register(
                        self.kubelet_socket, self.options.socket_name, self.options.resource
                    )
                except (grpc.RpcError, grpc.FutureTimeoutError) as err:
                    detail = err.details() if isinstance(err, grpc.RpcError) else "timed out"
                    log.warning("registration with the kubelet failed: %s; retrying", detail)
                else:
                    self.registrations += 1
                    # The kubelet may zero extended capacity when it re-registers its node.
                    threading.Thread(target=self._publish_node, daemon=True).start()
                    log.info(
                        "registered %s with the kubelet at %s",
                        self.options.resource,
                        self.kubelet_socket,
                    )
                    return theirs
            self.stop.wait(REGISTER_RETRY)
        return None

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
        listing = self.pod_resources.owners()
        if listing is None:
            return []
        devices, pods = listing
        return cleanup.sweep(
            self.allocator.settings.state_dir, devices, pods, self.options.cleanup_grace
        )

    def _cleanup_loop(self) -> None:
        while not self.stop.wait(self.options.cleanup_interval):
            try:
                self.cleanup_once()
            except Exception:  # a cleanup bug must not take the plugin down
                log.exception("cleanup pass failed")
