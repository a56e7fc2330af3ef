"""Client of the kubelet's pod-resources API: which pod and container hold which device IDs."""

from __future__ import annotations

import logging

import grpc

from cgpu.core.api import podresources_v1_pb2 as pr
from cgpu.core.api import podresources_v1_pb2_grpc as pr_grpc

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"

Owner = tuple[str, str, str]  # (namespace, pod, container)


class PodResources:
    """Lists the devices of one resource per container; None when the kubelet is unreachable."""

    def __init__(self, socket_path: str, resource: str, timeout: float = 5.0) -> None:
        self.socket_path = socket_path
        self.resource = resource
        self.timeout = timeout

    def owners(self) -> tuple[dict[Owner, set[str]], set[tuple[str, str]]] | None:
        """({(namespace, pod, container): device IDs}, {(namespace, pod) of every pod})."""
        try:
            with grpc.insecure_channel(f"unix://{self.socket_path}") as channel:
                stub = pr_grpc.PodResourcesListerStub(channel)
                reply = stub.List(pr.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as err:
            log.debug("pod-resources List failed: %s", err)
            return None
        devices: dict[Owner, set[str]] = {}
        pods: set[tuple[str, str]] = set()
        for pod in reply.pod_resources:
            pods.add((pod.namespace, pod.name))
            for container in pod.containers:
                ids = {
                    ident
                    for dev in container.devices
                    if dev.resource_name == self.resource
                    for ident in dev.device_ids
                }
                if ids:
                    devices[(pod.namespace, pod.name, container.name)] = ids
        return devices, pods
