"""The DevicePlugin gRPC service the kubelet calls on the plugin's socket: the device list
from the inventory, the choices from a policy, the responses from the `ResponseBuilder`."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc

from cgpu.core.layout import KEY_ANNOTATION
from cgpu.deviceplugin.api import deviceplugin_v1beta1_pb2 as api
from cgpu.deviceplugin.api import deviceplugin_v1beta1_pb2_grpc as api_grpc
from cgpu.deviceplugin.errors import AllocationError
from cgpu.deviceplugin.plugin.response import ResponseBuilder
from cgpu.deviceplugin.rm.inventory import Inventory
from cgpu.deviceplugin.rm.policy import AllocationPolicy

log = logging.getLogger(__name__)

WATCH_POLL = 1.0


class DevicePluginService(api_grpc.DevicePluginServicer):
    """ListAndWatch from the inventory; allocation calls go to the policy."""

    def __init__(
        self,
        inventory: Inventory,
        policy: AllocationPolicy,
        responses: ResponseBuilder,
        stopping: threading.Event,
    ) -> None:
        self.inventory = inventory
        self.policy = policy
        self.responses = responses
        self.stopping = stopping
        self._cache: tuple[int, api.ListAndWatchResponse] | None = None
        self._cache_lock = threading.Lock()

    def listing(self) -> tuple[int, api.ListAndWatchResponse]:
        """The current device list as one response (built once per inventory version)."""
        with self._cache_lock:
            version, devices = self.inventory.snapshot()
            if self._cache is None or self._cache[0] != version:
                response = api.ListAndWatchResponse(
                    devices=[api.Device(ID=ident, health=health) for ident, health in devices]
                )
                self._cache = (version, response)
            return self._cache

    def GetDevicePluginOptions(self, request: api.Empty, context: grpc.ServicerContext):
        return api.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    def ListAndWatch(
        self, request: api.Empty, context: grpc.ServicerContext
    ) -> Iterator[api.ListAndWatchResponse]:
        seen = None
        while context.is_active() and not self.stopping.is_set():
            version, response = self.listing()
            if version != seen:
                seen = version
                log.info("ListAndWatch: sending %d devices", len(response.devices))
                yield response
            self.inventory.wait_for_change(version, WATCH_POLL)

    def GetPreferredAllocation(
        self, request: api.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> api.PreferredAllocationResponse:
        responses = []
        for req in request.container_requests:
            ids = self.policy.preferred(
                list(req.available_deviceIDs),
                list(req.must_include_deviceIDs),
                req.allocation_size,
            )
            responses.append(api.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return api.PreferredAllocationResponse(container_responses=responses)

    def Allocate(
        self, request: api.AllocateRequest, context: grpc.ServicerContext
    ) -> api.AllocateResponse:
        responses: list[api.ContainerAllocateResponse] = []
        try:
            for req in request.container_requests:
                allocation = self.policy.allocate(list(req.devices_ids))
                responses.append(self.responses.build(allocation))
        except Exception as err:
            for done in responses:  # all or nothing
                self.policy.rollback(done.annotations[KEY_ANNOTATION])
            if not isinstance(err, AllocationError):
                log.exception("Allocate failed")
                err = AllocationError(grpc.StatusCode.INTERNAL, f"allocation failed: {err}")
            log.warning("Allocate refused: %s", err.message)
            context.abort(err.code, err.message)
        return api.AllocateResponse(container_responses=responses)

    def PreStartContainer(
        self, request: api.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> api.PreStartContainerResponse:
        return api.PreStartContainerResponse()


def start_server(service: DevicePluginService, socket_path: Path) -> grpc.Server:
    """Serve on a fresh unix socket at `socket_path`."""
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    if socket_path.exists() or socket_path.is_symlink():
        os.unlink(socket_path)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="dp"))
    api_grpc.add_DevicePluginServicer_to_server(service, server)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    return server
