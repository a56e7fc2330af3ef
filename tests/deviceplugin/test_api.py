"""The committed gRPC modules match the .proto files and the kubelet's wire definition."""

from __future__ import annotations

import kubelet_wire as wire

from cgpu.core.api import podresources_v1_pb2 as pr
from cgpu.core.api import podresources_v1_pb2_grpc as pr_grpc
from cgpu.deviceplugin.api import deviceplugin_v1beta1_pb2 as dp
from cgpu.deviceplugin.api import deviceplugin_v1beta1_pb2_grpc as dp_grpc
from cgpu.deviceplugin.api import generate


def test_generated_modules_are_up_to_date() -> None:
    assert generate.stale() == []


def test_packages_and_services() -> None:
    assert dp.DESCRIPTOR.package == "v1beta1"
    assert pr.DESCRIPTOR.package == "v1"
    assert sorted(dp.DESCRIPTOR.services_by_name) == ["DevicePlugin", "Registration"]
    methods = [m.name for m in dp.DESCRIPTOR.services_by_name["DevicePlugin"].methods]
    assert methods == [
        "GetDevicePluginOptions",
        "ListAndWatch",
        "GetPreferredAllocation",
        "Allocate",
        "PreStartContainer",
    ]
    lister = pr.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert [m.name for m in lister.methods] == ["List", "GetAllocatableResources", "Get"]
    assert dp_grpc.DevicePluginStub and dp_grpc.RegistrationStub and pr_grpc.PodResourcesListerStub


def _numbers(message) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}


def test_field_numbers_match_the_kubelet() -> None:
    assert _numbers(dp.RegisterRequest) == wire.REGISTER
    assert _numbers(dp.DevicePluginOptions) == wire.OPTIONS
    assert _numbers(dp.Device) == wire.DEVICE
    assert _numbers(dp.ContainerPreferredAllocationRequest) == {
        "available_deviceIDs": 1,
        "must_include_deviceIDs": 2,
        "allocation_size": 3,
    }
    assert _numbers(dp.ContainerAllocateResponse) == wire.ALLOC_RESP
    assert _numbers(dp.Mount) == wire.MOUNT
    assert _numbers(dp.DeviceSpec) == {"container_path": 1, "host_path": 2, "permissions": 3}
    assert _numbers(dp.PreStartContainerRequest) == {"devices_ids": 1}
    assert _numbers(dp.NUMANode) == {"ID": 1}
    assert _numbers(pr.PodResources) == {"name": 1, "namespace": 2, "containers": 3}
    assert _numbers(pr.ContainerResources) == {
        "name": 1,
        "devices": 2,
        "cpu_ids": 3,
        "memory": 4,
        "dynamic_resources": 5,
    }
    assert _numbers(pr.ContainerDevices) == {"resource_name": 1, "device_ids": 2, "topology": 3}
    assert _numbers(pr.GetPodResourcesRequest) == {"pod_name": 1, "pod_namespace": 2}
    assert _numbers(pr.AllocatableResourcesResponse) == {"devices": 1, "cpu_ids": 2, "memory": 3}


def test_hand_encoded_messages_decode_with_the_generated_classes() -> None:
    raw = wire.allocate_request([["GPU-a-0", "GPU-a-1"], ["GPU-b-3"]])
    parsed = dp.AllocateRequest.FromString(raw)
    assert [list(c.devices_ids) for c in parsed.container_requests] == [
        ["GPU-a-0", "GPU-a-1"],
        ["GPU-b-3"],
    ]
    response = dp.AllocateResponse(
        container_responses=[
            dp.ContainerAllocateResponse(
                envs={"A": "1"},
                mounts=[dp.Mount(container_path="/c", host_path="/h", read_only=True)],
                annotations={"k": "v"},
            )
        ]
    )
    decoded = wire.allocate_response(response.SerializeToString())
    assert decoded[0]["envs"] == {"A": "1"}
    assert decoded[0]["mounts"] == [{"container_path": "/c", "host_path": "/h", "read_only": True}]
    assert decoded[0]["annotations"] == {"k": "v"}
    listing = pr.ListPodResourcesResponse.FromString(
        wire.pod_resources_list([("ns", "pod", [("c", "aliyun.com/gpu-mem", ["x-0"])])])
    )
    assert listing.pod_resources[0].containers[0].devices[0].device_ids == ["x-0"]
