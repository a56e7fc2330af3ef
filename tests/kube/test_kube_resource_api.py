"""The fake API server's resource.k8s.io/v1, driven by the official client's typed models."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from kube.apiserver import FakeApiServer


@pytest.fixture
def resource(kube_api: FakeApiServer, tmp_path) -> client.ResourceV1Api:
    configuration = client.Configuration()
    config.load_kube_config(
        config_file=str(kube_api.kubeconfig(tmp_path / "kc")), client_configuration=configuration
    )
    return client.ResourceV1Api(client.ApiClient(configuration))


def _slice(name: str, node: str, driver: str = "gpu.cgpu.io") -> client.V1ResourceSlice:
    return client.V1ResourceSlice(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1ResourceSliceSpec(
            driver=driver,
            node_name=node,
            pool=client.V1ResourcePool(name=node, generation=1, resource_slice_count=1),
            devices=[
                client.V1Device(
                    name="gpu-0",
                    allow_multiple_allocations=True,
                    capacity={"memory": client.V1DeviceCapacity(value="16Gi")},
                )
            ],
        ),
    )


def test_device_classes_and_slices_create_list_replace_delete(kube_api, resource) -> None:
    resource.create_device_class(
        client.V1DeviceClass(
            metadata=client.V1ObjectMeta(name="gpu.cgpu.io"),
            spec=client.V1DeviceClassSpec(
                selectors=[
                    client.V1DeviceSelector(
                        cel=client.V1CELDeviceSelector(expression='device.driver == "gpu.cgpu.io"')
                    )
                ]
            ),
        )
    )
    assert [c.metadata.name for c in resource.list_device_class().items] == ["gpu.cgpu.io"]
    created = resource.create_resource_slice(_slice("n1-gpu", "n1"))
    resource.create_resource_slice(_slice("n2-gpu", "n2"))
    resource.create_resource_slice(_slice("n1-other", "n1", driver="gpu.nvidia.com"))
    assert created.spec.devices[0].allow_multiple_allocations is True
    mine = resource.list_resource_slice(field_selector="spec.driver=gpu.cgpu.io,spec.nodeName=n1")
    assert [s.metadata.name for s in mine.items] == ["n1-gpu"]
    created.spec.pool.generation = 2
    replaced = resource.replace_resource_slice("n1-gpu", created)
    assert replaced.spec.pool.generation == 2
    with pytest.raises(ApiException) as stale:
        resource.replace_resource_slice("n1-gpu", created)  # the old resourceVersion
    assert stale.value.status == 409
    resource.delete_resource_slice("n2-gpu")
    with pytest.raises(ApiException) as gone:
        resource.read_resource_slice("n2-gpu")
    assert gone.value.status == 404


def test_slices_watch(kube_api, resource) -> None:
    listing = resource.list_resource_slice()
    events: list[tuple[str, str]] = []

    def follow() -> None:
        stream = watch.Watch().stream(
            resource.list_resource_slice,
            resource_version=listing.metadata.resource_version,
            timeout_seconds=5,
        )
        for event in stream:
            events.append((event["type"], event["object"].metadata.name))
            if len(events) == 3:
                return

    thread = threading.Thread(target=follow)
    thread.start()
    resource.create_resource_slice(_slice("s", "n1"))
    current = resource.read_resource_slice("s")
    current.spec.pool.generation = 2
    resource.replace_resource_slice("s", current)
    resource.delete_resource_slice("s")
    thread.join(10)
    assert events == [("ADDED", "s"), ("MODIFIED", "s"), ("DELETED", "s")]


def test_claims_keep_spec_and_status_apart(kube_api, resource) -> None:
    claim = client.ResourceV1ResourceClaim(
        metadata=client.V1ObjectMeta(name="c"),
        spec=client.V1ResourceClaimSpec(
            devices=client.V1DeviceClaim(
                requests=[
                    client.V1DeviceRequest(
                        name="gpu",
                        exactly=client.V1ExactDeviceRequest(
                            device_class_name="gpu.cgpu.io",
                            capacity=client.V1CapacityRequirements(requests={"memory": "4Gi"}),
                        ),
                    )
                ]
            )
        ),
    )
    created = resource.create_namespaced_resource_claim("ml", claim)
    assert created.metadata.namespace == "ml" and created.status is None
    created.status = client.V1ResourceClaimStatus(
        allocation=client.V1AllocationResult(
            devices=client.V1DeviceAllocationResult(
                results=[
                    client.V1DeviceRequestAllocationResult(
                        request="gpu",
                        driver="gpu.cgpu.io",
                        pool="n1",
                        device="gpu-0",
                        consumed_capacity={"memory": "4Gi"},
                        share_id="7f0c9a52-6a0e-4c8e-9a7e-0b8f3e1d2c4a",
                    )
                ]
            )
        )
    )
    created.spec.devices.requests[0].name = "changed-through-status"
    stored = resource.replace_namespaced_resource_claim_status("c", "ml", created)
    assert stored.spec.devices.requests[0].name == "gpu"  # /status keeps the stored spec
    result = stored.status.allocation.devices.results[0]
    assert (result.consumed_capacity, result.share_id) == (
        {"memory": "4Gi"},
        "7f0c9a52-6a0e-4c8e-9a7e-0b8f3e1d2c4a",
    )
    listed = resource.list_resource_claim_for_all_namespaces()
    assert [c.metadata.name for c in listed.items] == ["c"]
    with pytest.raises(ApiException) as wrong:
        resource.read_namespaced_resource_claim("c", "default")
    assert wrong.value.status == 404
