"""DRAResourceHealth: each device's health, streamed to the kubelet (v1, and v1alpha1's name).

The kubelet shows it in the pod's status (`allocatedResourcesStatus`). Each message lists every
GPU of the node: HEALTHY, or UNHEALTHY with the XID that took it out of the ResourceSlice. A
message goes out at once on a change, and every HEARTBEAT_S seconds otherwise, well within the
timeout it announces, so that a driver that stops answering turns its devices Unknown.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc

from cgpu.dra.api import dra_health_v1_pb2 as api
from cgpu.dra.inventory import Inventory

HEARTBEAT_S = 10.0
TIMEOUT_S = 60
SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")  # same messages


class HealthService:
    """NodeWatchResources for one pool."""

    def __init__(self, inventory: Inventory, pool: str, stopping: threading.Event) -> None:
        self.inventory = inventory
        self.pool = pool
        self.stopping = stopping

    def message(self) -> tuple[int, api.NodeWatchResourcesResponse]:
        """The current health of every device, and its version."""
        version, updated, states = self.inventory.health()
        response = api.NodeWatchResourcesResponse()
        for gpu, problem in states:
            response.devices.add(
                device=api.DeviceIdentifier(pool_name=self.pool, device_name=gpu.device_name),
                health=api.UNHEALTHY if problem else api.HEALTHY,
                last_updated_time=int(updated),
                health_check_timeout_seconds=TIMEOUT_S,
                message=problem or "",
            )
        return version, response

    def NodeWatchResources(
        self, request: api.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[api.NodeWatchResourcesResponse]:
        while context.is_active() and not self.stopping.is_set():
            version, response = self.message()
            yield response
            self._wait(version, context)

    def _wait(self, version: int, context: grpc.ServicerContext) -> None:
        """Until a change, the heartbeat, the kubelet going away or the driver stopping."""
        deadline = time.monotonic() + HEARTBEAT_S
        while context.is_active() and not self.stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self.inventory.wait_for_change(version, min(left, 1.0)) != version:
                return

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        """The service under each name the kubelet may call."""
        method = grpc.unary_stream_rpc_method_handler(
            self.NodeWatchResources,
            request_deserializer=api.NodeWatchResourcesRequest.FromString,
            response_serializer=api.NodeWatchResourcesResponse.SerializeToString,
        )
        return [
            grpc.method_handlers_generic_handler(name, {"NodeWatchResources": method})
            for name in SERVICES
        ]
