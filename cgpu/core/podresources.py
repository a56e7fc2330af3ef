"""Client of the kubelet's pod-resources API: which pod and container hold which device IDs,
and which hold which DRA claims (by their CDI device names)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import grpc

from cgpu.core.api import podresources_v1_pb2 as pr
from cgpu.core.api import podresources_v1_pb2_grpc as pr_grpc

log = logging.getLogger(__name__)


Owner = tuple[str, str, str]  # (namespace, pod, container)


@dataclass(frozen=True)
class ClaimUse:
    """A container using a DRA claim's device."""

    namespace: str
    pod: str
    container: str
    claim: str


class PodResources:
    """Lists the devices of one resource per container; None when the kubelet is unreachable."""

    def __init__(self, socket_path: str, resource: str, timeout: float = 5.0) -> None:
        self.socket_path = socket_path
        self.resource = resource
        self.timeout = timeout

    def listing(self) -> pr.ListPodResourcesResponse | None:
        """The kubelet's List answer, or None when it does not answer."""
        try:
            with grpc.insecure_channel(f"unix://{self.socket_path}") as channel:
                stub = pr_grpc.PodResourcesListerStub(channel)
                return stub.List(pr.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as err:
            log.debug("pod-resources List failed: %s", err)
            return None

    def owners(self) -> tuple[dict[Owner, set[str]], set[tuple[str, str]]] | None:
        """({(namespace, pod, container): device IDs}, {(namespace, pod) of every pod})."""
        reply = self.listing()
        return None if reply is None else owners_in(reply, self.resource)


def owners_in(
    reply: pr.ListPodResourcesResponse, resource: str
) -> tuple[dict[Owner, set[str]], set[tuple[str, str]]]:
    """The device IDs of `resource` per container, and every pod, in one List answer."""
    devices: dict[Owner, set[str]] = {}
    pods: set[tuple[str, str]] = set()
    for pod in reply.pod_resources:
        pods.add((pod.namespace, pod.name))
        for container in pod.containers:
            ids = {
                ident
                for dev in container.devices
                if dev.resource_name == resource
                for ident in dev.device_ids
            }
            if ids:
                devices[(pod.namespace, pod.name, container.name)] = ids
    return devices, pods


def claims_in(reply: pr.ListPodResourcesResponse, driver: str) -> dict[str, list[ClaimUse]]:
    """{CDI device name: the containers using it} for the devices of DRA driver `driver`."""
    out: dict[str, list[ClaimUse]] = {}
    for pod in reply.pod_resources:
        for container in pod.containers:
            for dynamic in container.dynamic_resources:
                use = ClaimUse(pod.namespace, pod.name, container.name, dynamic.claim_name)
                for claimed in dynamic.claim_resources:
                    if claimed.driver_name != driver:
                        continue
                    for cdi in claimed.cdi_devices:
                        users = out.setdefault(cdi.name, [])
                        if use not in users:
                            users.append(use)
    return out
