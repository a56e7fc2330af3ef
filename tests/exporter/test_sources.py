"""NVML, pod-resources and label sources, with fakes (no native code needed)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from exporter_helpers import GIB, UUID0, UUID1, FakeNvml, pod_resources_kubelet

from cgpu.exporter.labels import Identity, identity_from_meta, resolve
from cgpu.exporter.nvml import NvmlSource
from cgpu.exporter.podresources import PodResourcesSource


class Clock:
    """A hand-driven monotonic clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# ---- NVML -----------------------------------------------------------------------------------


def test_nvml_reads_static_facts_once(fake_nvml: FakeNvml) -> None:
    source = NvmlSource(loader=lambda: fake_nvml)
    first = source.gpus()
    second = source.gpus()
    assert [(g.uuid, g.index, g.model) for g in second] == [
        (UUID0, 0, "Tesla V100-SXM2-16GB"),
        (UUID1, 1, "Tesla T4"),
    ]
    assert first[0].total == 16 * GIB and first[0].used == GIB
    assert fake_nvml.init_calls == 1
    assert source.up and source.uuid_to_index() == {UUID0: 0, UUID1: 1}


def test_nvml_init_is_retried_lazily(fake_nvml: FakeNvml) -> None:
    clock = Clock()
    fake_nvml.fail_init = True
    source = NvmlSource(retry_interval=30, loader=lambda: fake_nvml, clock=clock)
    assert source.gpus() == [] and not source.up
    assert "Driver Not Loaded" in source.last_error
    fake_nvml.fail_init = False
    clock.now += 10
    assert source.gpus() == []  # within the retry interval: no new attempt
    assert fake_nvml.init_calls == 1
    clock.now += 25
    assert len(source.gpus()) == 2 and source.up


def test_nvml_missing_library_never_raises() -> None:
    def loader() -> ModuleType:
        raise ImportError("No module named 'pynvml'")

    source = NvmlSource(loader=loader)
    assert source.gpus() == [] and not source.up


def test_nvml_every_gpu_failing_restarts_the_session(fake_nvml: FakeNvml) -> None:
    clock = Clock()
    source = NvmlSource(retry_interval=30, loader=lambda: fake_nvml, clock=clock)
    fake_nvml.fail_memory = {0, 1}
    assert [g.healthy for g in source.gpus()] == [False, False]
    assert not source.up and fake_nvml.shutdown_calls == 1
    fake_nvml.fail_memory = set()
    clock.now += 5  # known GPUs stay listed, unhealthy, until the session is retried
    assert [(g.uuid, g.healthy) for g in source.gpus()] == [(UUID0, False), (UUID1, False)]
    clock.now += 30
    assert [g.healthy for g in source.gpus()] == [True, True]
    assert fake_nvml.init_calls == 2 and source.up


def test_nvml_one_gpu_failing_keeps_the_session(fake_nvml: FakeNvml) -> None:
    source = NvmlSource(loader=lambda: fake_nvml)
    fake_nvml.fail_memory = {1}
    assert [g.healthy for g in source.gpus()] == [True, False]
    assert source.up and fake_nvml.shutdown_calls == 0


# ---- labels ---------------------------------------------------------------------------------


def test_identity_from_meta_fields_then_annotations_then_key() -> None:
    assert identity_from_meta("k", {"namespace": "n", "pod": "p", "container": "c"}) == Identity(
        "n", "p", "c"
    )
    cri = {
        "io.kubernetes.pod.namespace": "n2",
        "io.kubernetes.pod.name": "p2",
        "io.kubernetes.container.name": "c2",
    }
    assert identity_from_meta("k", {"annotations": cri}) == Identity("n2", "p2", "c2")
    assert identity_from_meta("k", {"pod": 7, "annotations": "junk"}) == Identity("", "", "k")


def test_resolve_prefers_pod_resources() -> None:
    meta = {"device_ids": ["x", "y"], "namespace": "n", "pod": "p", "container": "c"}
    assert resolve("k", meta, {"y": Identity("a", "b", "c")}) == Identity("a", "b", "c")
    assert resolve("k", meta, {}) == Identity("n", "p", "c")
    assert resolve("k", {"device_ids": "nope"}, {"nope": Identity("a", "b", "c")}).container == "k"


# ---- pod-resources --------------------------------------------------------------------------


def test_pod_resources_cache_and_refresh_on_miss() -> None:
    clock = Clock()
    answers = [{"d1": Identity("ns", "p", "c")}, {"d2": Identity("ns", "q", "c")}]
    calls = 0

    def lister() -> dict[str, Identity]:
        nonlocal calls
        calls += 1
        return answers[min(calls - 1, 1)]

    source = PodResourcesSource(ttl=10, min_refresh=1, lister=lister, clock=clock)
    assert set(source.devices(["d1"])) == {"d1"} and source.up
    assert set(source.devices(["d1"])) == {"d1"} and calls == 1  # cached
    assert "d2" not in source.devices(["d2"]) and calls == 1  # a miss, but too soon
    clock.now += 1.5
    assert "d2" in source.devices(["d2"]) and calls == 2  # a miss refetches
    clock.now += 11
    source.devices([])
    assert calls == 3  # stale after the TTL


def test_pod_resources_failure_backs_off_and_never_raises() -> None:
    clock = Clock()
    calls = 0

    def lister() -> dict[str, Identity]:
        nonlocal calls
        calls += 1
        raise OSError("connection refused")

    source = PodResourcesSource(retry_interval=10, lister=lister, clock=clock)
    assert source.devices(["d1"]) == {} and not source.up
    clock.now += 5
    source.devices(["d1"])
    assert calls == 1
    clock.now += 6
    source.devices(["d1"])
    assert calls == 2


def test_pod_resources_without_socket(tmp_path: Path) -> None:
    source = PodResourcesSource(str(tmp_path / "kubelet.sock"))
    assert source.devices(["d1"]) == {} and not source.up


def test_pod_resources_over_grpc(tmp_path: Path) -> None:
    """A fake kubelet serving v1 List on a unix socket; only our resource's devices count."""
    from cgpu.core.api import podresources_v1_pb2 as pr

    def list_pods(request: object, context: object) -> object:
        def devices(resource: str, *ids: str) -> object:
            return pr.ContainerDevices(resource_name=resource, device_ids=list(ids))

        server_ctr = pr.ContainerResources(
            name="server",
            devices=[devices("aliyun.com/gpu-mem", "d1", "d2"), devices("nvidia.com/gpu", "x")],
        )
        return pr.ListPodResourcesResponse(
            pod_resources=[pr.PodResources(name="web-0", namespace="prod", containers=[server_ctr])]
        )

    with pod_resources_kubelet(tmp_path / "kubelet.sock", list_pods) as sock:
        source = PodResourcesSource(str(sock))
        found = source.devices(["d2"])
        assert source.up
        assert found == {
            "d1": Identity("prod", "web-0", "server"),
            "d2": Identity("prod", "web-0", "server"),
        }
