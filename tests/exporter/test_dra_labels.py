"""A DRA claim's container directory, as `cgpu dra-driver` prepares it, in the exporter: labelled
with its pod, namespace and claim (pod-resources' dynamic resources first, then meta.json)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from exporter_helpers import GIB, UUID0, FakeNvml, ctr, labels, pod_resources_kubelet, scrape

from cgpu.core.api import podresources_v1_pb2 as pr
from cgpu.dra.checkpoint import Checkpoint
from cgpu.dra.inventory import GpuInfo, Inventory
from cgpu.dra.prepare import ClaimRef, PrepareConfig, Preparer
from cgpu.exporter.collector import CgpuCollector
from cgpu.exporter.labels import Identity
from cgpu.exporter.nvml import NvmlSource
from cgpu.exporter.podresources import PodResourcesSource

UID = "6f1c2d3e-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
CDI = f"gpu.cgpu.io/claim={UID}"


class Claims:
    """The API server's answer for the one claim."""

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        result = {
            "request": "gpu",
            "driver": "gpu.cgpu.io",
            "pool": "n1",
            "device": "gpu-0",
            "consumedCapacity": {"memory": "2Gi"},
        }
        return {
            "metadata": {"name": name, "namespace": namespace, "uid": UID},
            "status": {
                "allocation": {"devices": {"results": [result]}},
                "reservedFor": [{"resource": "pods", "name": "trainer", "uid": "p-1"}],
            },
        }


@pytest.fixture
def prepared(state_dir: Path, tmp_path: Path) -> Path:
    """The claim prepared by the driver's own code; returns its container directory."""
    gpu = GpuInfo(0, UUID0, "sim", 16 * GIB, "Ampere", "550.54.15", "8.0", 0)
    settings = PrepareConfig(
        state_dir, tmp_path / "cdi", tmp_path / "shim", tmp_path / "preload", "n1"
    )
    preparer = Preparer(Inventory([gpu]), settings, Claims(), Checkpoint(state_dir))
    preparer.prepare(ClaimRef("ml", UID, "trainer-gpu"))
    return state_dir / "containers" / f"dra-{UID}"


def _claim_info(**kv: str) -> frozenset:
    return labels(**kv)


def test_labels_from_meta_without_the_kubelet(
    state_dir: Path, fake_nvml: FakeNvml, prepared: Path
) -> None:
    collector = CgpuCollector(state_dir, gpus=NvmlSource(loader=lambda: fake_nvml))
    series = scrape(collector)
    key = ctr("ml", "trainer", prepared.name, UUID0, "0")
    assert series["cgpu_container_gpu_memory_limit_bytes"] == {key: 2 * GIB}
    info = _claim_info(namespace="ml", pod="trainer", container=prepared.name, claim="trainer-gpu")
    assert series["cgpu_container_claim_info"] == {info: 1}


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[Path]:
    """pod-resources List: two containers of a pod share the claim; one of another driver."""

    def claim(driver: str, cdi: str, name: str) -> pr.DynamicResource:
        device = pr.ClaimResource(
            cdi_devices=[pr.CDIDevice(name=cdi)], driver_name=driver, pool_name="n1",
            device_name="gpu-0",
        )  # fmt: skip
        return pr.DynamicResource(claim_name=name, claim_namespace="ml", claim_resources=[device])

    def list_pods(request: object, context: object) -> pr.ListPodResourcesResponse:
        ours = claim("gpu.cgpu.io", CDI, "trainer-gpu")
        theirs = claim("gpu.nvidia.com", "nvidia.com/gpu=0", "other")
        containers = [
            pr.ContainerResources(name="worker", dynamic_resources=[ours, theirs]),
            pr.ContainerResources(name="sidecar", dynamic_resources=[ours]),
        ]
        pod = pr.PodResources(name="trainer", namespace="ml", containers=containers)
        return pr.ListPodResourcesResponse(pod_resources=[pod])

    with pod_resources_kubelet(tmp_path / "kubelet.sock", list_pods) as sock:
        yield sock


def test_labels_from_pod_resources_dynamic_resources(
    state_dir: Path, fake_nvml: FakeNvml, prepared: Path, kubelet: Path
) -> None:
    pods = PodResourcesSource(str(kubelet))
    assert pods.devices([CDI]) == {CDI: Identity("ml", "trainer", "sidecar,worker", "trainer-gpu")}
    collector = CgpuCollector(state_dir, gpus=NvmlSource(loader=lambda: fake_nvml), pods=pods)
    series = scrape(collector)
    key = ctr("ml", "trainer", "sidecar,worker", UUID0, "0")
    assert series["cgpu_container_gpu_memory_limit_bytes"] == {key: 2 * GIB}
    info = _claim_info(
        namespace="ml", pod="trainer", container="sidecar,worker", claim="trainer-gpu"
    )
    assert series["cgpu_container_claim_info"] == {info: 1}


def test_containers_without_a_claim_have_no_claim_series(
    state_dir: Path, fake_nvml: FakeNvml, make_container
) -> None:
    make_container("c1", {UUID0: GIB}, namespace="ns", pod="p", container="c")
    series = scrape(CgpuCollector(state_dir, gpus=NvmlSource(loader=lambda: fake_nvml)))
    assert series.get("cgpu_container_claim_info", {}) == {}
