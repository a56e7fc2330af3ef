"""The collector over synthetic ledgers written through the binding (no GPU, fake NVML)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from exporter_helpers import GIB, MIB, UUID0, UUID1, FakeNvml, ctr, labels, scrape

from cgpu.core.layout import LEDGER_NAME
from cgpu.exporter.collector import CgpuCollector
from cgpu.exporter.labels import Identity
from cgpu.exporter.nvml import NvmlSource
from cgpu.exporter.podresources import PodResourcesSource

CONTRACT = {
    "cgpu_container_gpu_memory_limit_bytes": {
        "namespace",
        "pod",
        "container",
        "gpu_uuid",
        "gpu_index",
    },
    "cgpu_container_gpu_memory_used_bytes": {
        "namespace",
        "pod",
        "container",
        "gpu_uuid",
        "gpu_index",
    },
    "cgpu_container_gpu_processes": {"namespace", "pod", "container", "gpu_uuid", "gpu_index"},
    "cgpu_gpu_memory_total_bytes": {"gpu_uuid", "gpu_index", "model"},
    "cgpu_gpu_memory_used_bytes": {"gpu_uuid", "gpu_index", "model"},
    "cgpu_gpu_memory_allocated_bytes": {"gpu_uuid", "gpu_index"},
    "cgpu_gpu_containers": {"gpu_uuid", "gpu_index"},
}


@pytest.fixture
def collector(state_dir: Path, fake_nvml: FakeNvml) -> CgpuCollector:
    """A collector over the test state dir, with two fake GPUs and no kubelet."""
    return CgpuCollector(state_dir, gpus=NvmlSource(loader=lambda: fake_nvml))


def test_contract_names_and_labels(collector: CgpuCollector, make_container: Callable) -> None:
    make_container("c1", {UUID0: 4 * GIB}, namespace="ns", pod="p", container="c")
    series = scrape(collector)
    for name, wanted in CONTRACT.items():
        assert name in series, name
        for label_set in series[name]:
            assert {k for k, _ in label_set} == wanted, name


def test_new_container_is_exported_at_zero(
    collector: CgpuCollector, make_container: Callable
) -> None:
    make_container("c1", {UUID0: 4 * GIB}, namespace="ns", pod="p", container="c")
    series = scrape(collector)
    key = ctr("ns", "p", "c", UUID0, "0")
    assert series["cgpu_container_gpu_memory_limit_bytes"] == {key: 4 * GIB}
    assert series["cgpu_container_gpu_memory_used_bytes"] == {key: 0}
    assert series["cgpu_container_gpu_processes"] == {key: 0}
    assert series["cgpu_gpu_memory_allocated_bytes"] == {
        labels(gpu_uuid=UUID0, gpu_index="0"): 4 * GIB,
        labels(gpu_uuid=UUID1, gpu_index="1"): 0,
    }
    assert series["cgpu_gpu_containers"][labels(gpu_uuid=UUID0, gpu_index="0")] == 1
    gpu0 = labels(gpu_uuid=UUID0, gpu_index="0", model="Tesla V100-SXM2-16GB")
    assert series["cgpu_gpu_memory_total_bytes"][gpu0] == 16 * GIB
    assert series["cgpu_gpu_memory_used_bytes"][gpu0] == GIB
    assert series["cgpu_gpu_healthy"][gpu0] == 1


def test_live_process_counts_and_stops_counting_when_it_exits(
    collector: CgpuCollector, make_container: Callable, hold: Callable
) -> None:
    d = make_container(
        "c1", {UUID0: 4 * GIB, UUID1: 2 * GIB}, namespace="ns", pod="p", container="c"
    )
    first = hold(d / LEDGER_NAME, {0: 300 * MIB, 1: 5 * MIB})
    second = hold(d / LEDGER_NAME, {0: 100 * MIB})
    series = scrape(collector)
    used = series["cgpu_container_gpu_memory_used_bytes"]
    assert used[ctr("ns", "p", "c", UUID0, "0")] == 400 * MIB
    assert used[ctr("ns", "p", "c", UUID1, "1")] == 5 * MIB
    assert series["cgpu_container_gpu_processes"][ctr("ns", "p", "c", UUID0, "0")] == 2
    assert (
        series["cgpu_container_gpu_memory_peak_bytes"][ctr("ns", "p", "c", UUID0, "0")] >= 400 * MIB
    )

    first.kill()  # SIGKILL: no free ever reaches the ledger
    series = scrape(collector)
    assert (
        series["cgpu_container_gpu_memory_used_bytes"][ctr("ns", "p", "c", UUID0, "0")] == 100 * MIB
    )
    assert series["cgpu_container_gpu_memory_used_bytes"][ctr("ns", "p", "c", UUID1, "1")] == 0
    assert series["cgpu_container_gpu_processes"][ctr("ns", "p", "c", UUID0, "0")] == 1

    second.release()
    series = scrape(collector)
    assert series["cgpu_container_gpu_memory_used_bytes"][ctr("ns", "p", "c", UUID0, "0")] == 0
    assert series["cgpu_container_gpu_processes"][ctr("ns", "p", "c", UUID0, "0")] == 0
    assert (
        series["cgpu_container_gpu_memory_limit_bytes"][ctr("ns", "p", "c", UUID0, "0")] == 4 * GIB
    )


def test_series_vanish_with_the_container(
    collector: CgpuCollector, make_container: Callable, state_dir: Path
) -> None:
    gone = make_container("gone", {UUID0: GIB}, namespace="ns", pod="a", container="c")
    make_container("kept", {UUID0: 2 * GIB}, namespace="ns", pod="b", container="c")
    assert len(scrape(collector)["cgpu_container_gpu_memory_limit_bytes"]) == 2
    shutil.rmtree(gone)
    series = scrape(collector)
    assert series["cgpu_container_gpu_memory_limit_bytes"] == {
        ctr("ns", "b", "c", UUID0, "0"): 2 * GIB
    }
    assert (
        series["cgpu_gpu_memory_allocated_bytes"][labels(gpu_uuid=UUID0, gpu_index="0")] == 2 * GIB
    )
    assert series["cgpu_gpu_containers"][labels(gpu_uuid=UUID0, gpu_index="0")] == 1


def test_missing_ledger_falls_back_to_config(
    collector: CgpuCollector, make_container: Callable
) -> None:
    d = make_container("c1", {UUID1: 3 * GIB}, namespace="ns", pod="p", container="c")
    (d / LEDGER_NAME).unlink()
    series = scrape(collector)
    key = ctr("ns", "p", "c", UUID1, "1")
    assert series["cgpu_container_gpu_memory_limit_bytes"] == {key: 3 * GIB}
    assert series["cgpu_container_gpu_memory_used_bytes"] == {key: 0}
    assert all(v == 0 for v in series["cgpu_ledgers_skipped"].values())


def test_directory_without_ledger_or_config_is_ignored(
    collector: CgpuCollector, state_dir: Path
) -> None:
    (state_dir / "containers" / "empty").mkdir(parents=True)
    series = scrape(collector)
    assert "cgpu_container_gpu_memory_limit_bytes" not in series
    assert all(v == 0 for v in series["cgpu_ledger_errors_total"].values())


def _corrupt(path: Path, kind: str) -> None:
    data = bytearray(path.read_bytes())
    if kind == "foreign":
        data[:8] = b"NOTCGPU!"
    elif kind == "truncated":
        del data[len(data) // 2 :]
    elif kind == "empty":
        data = bytearray()
    elif kind == "version":
        data[8:12] = (99).to_bytes(4, "little")  # layout v1 header: magic[8], u32 version
    elif kind == "corrupt":
        data[16:20] = (999).to_bytes(4, "little")  # ... u32 size, u32 ndevices (max 16)
    path.write_bytes(bytes(data))


def test_bad_ledgers_are_skipped_and_counted(
    collector: CgpuCollector, make_container: Callable
) -> None:
    kinds = {
        "foreign": "foreign",
        "truncated": "truncated",
        "empty": "truncated",
        "version": "version",
        "corrupt": "corrupt",
    }
    for kind in kinds:
        d = make_container(f"bad-{kind}", {UUID0: GIB}, namespace="ns", pod=kind, container="c")
        _corrupt(d / LEDGER_NAME, kind)
    make_container("good", {UUID0: 2 * GIB}, namespace="ns", pod="good", container="c")

    series = scrape(collector)
    assert series["cgpu_container_gpu_memory_limit_bytes"] == {
        ctr("ns", "good", "c", UUID0, "0"): 2 * GIB
    }
    skipped = series["cgpu_ledgers_skipped"]
    assert skipped[labels(reason="foreign")] == 1
    assert skipped[labels(reason="truncated")] == 2
    assert skipped[labels(reason="version")] == 1
    assert skipped[labels(reason="corrupt")] == 1
    assert skipped[labels(reason="config")] == 0
    errors = series["cgpu_ledger_errors_total"]
    assert errors[labels(reason="truncated")] == 2

    errors = scrape(collector)["cgpu_ledger_errors_total"]
    assert errors[labels(reason="truncated")] == 4  # counted again at every scrape that meets it
    assert errors[labels(reason="foreign")] == 2


def test_bad_config_without_ledger_is_counted(
    collector: CgpuCollector, make_container: Callable
) -> None:
    d = make_container("c1", {UUID0: GIB})
    (d / LEDGER_NAME).unlink()
    (d / "cgpu.conf").write_text("version 1\ndevice nonsense\n")
    series = scrape(collector)
    assert "cgpu_container_gpu_memory_limit_bytes" not in series
    assert series["cgpu_ledgers_skipped"][labels(reason="config")] == 1


def test_labels_from_meta_annotations_and_key(
    collector: CgpuCollector, make_container: Callable
) -> None:
    make_container("by-fields", {UUID0: GIB}, namespace="ns", pod="p1", container="c1")
    make_container(
        "by-annotations",
        {UUID0: GIB},
        source="hook",
        annotations={
            "io.kubernetes.cri.sandbox-namespace": "team",
            "io.kubernetes.cri.sandbox-name": "p2",
            "io.kubernetes.cri.container-name": "c2",
        },
    )
    make_container("run-42-abc", {UUID0: GIB}, source="run")
    limits = scrape(collector)["cgpu_container_gpu_memory_limit_bytes"]
    assert set(limits) == {
        ctr("ns", "p1", "c1", UUID0, "0"),
        ctr("team", "p2", "c2", UUID0, "0"),
        ctr("", "", "run-42-abc", UUID0, "0"),
    }


def test_labels_from_pod_resources_win(
    state_dir: Path, fake_nvml: FakeNvml, make_container: Callable
) -> None:
    pods = PodResourcesSource(lister=lambda: {"dev-a": Identity("prod", "web-0", "server")})
    collector = CgpuCollector(state_dir, gpus=NvmlSource(loader=lambda: fake_nvml), pods=pods)
    make_container(
        "k1", {UUID0: GIB}, namespace="stale", pod="old", container="x", device_ids=["dev-a"]
    )
    make_container(
        "k2", {UUID0: GIB}, namespace="ns", pod="other", container="y", device_ids=["dev-b"]
    )
    series = scrape(collector)
    assert set(series["cgpu_container_gpu_memory_limit_bytes"]) == {
        ctr("prod", "web-0", "server", UUID0, "0"),
        ctr("ns", "other", "y", UUID0, "0"),
    }
    assert series["cgpu_exporter_pod_resources_up"][labels()] == 1


def test_directories_of_one_container_are_merged(
    collector: CgpuCollector, make_container: Callable, hold: Callable
) -> None:
    old = make_container("old", {UUID0: 2 * GIB}, namespace="ns", pod="p", container="c")
    new = make_container("new", {UUID0: 2 * GIB}, namespace="ns", pod="p", container="c")
    hold(old / LEDGER_NAME, {0: 10 * MIB})
    hold(new / LEDGER_NAME, {0: 20 * MIB})
    series = scrape(collector)
    key = ctr("ns", "p", "c", UUID0, "0")
    assert series["cgpu_container_gpu_memory_limit_bytes"] == {key: 2 * GIB}
    assert series["cgpu_container_gpu_memory_used_bytes"] == {key: 30 * MIB}
    assert (
        series["cgpu_gpu_memory_allocated_bytes"][labels(gpu_uuid=UUID0, gpu_index="0")] == 2 * GIB
    )


def test_without_nvml_container_series_stay(state_dir: Path, make_container: Callable) -> None:
    broken = FakeNvml([])
    broken.fail_init = True
    collector = CgpuCollector(state_dir, gpus=NvmlSource(loader=lambda: broken))
    make_container("c1", {UUID0: GIB}, namespace="ns", pod="p", container="c")
    series = scrape(collector)
    assert series["cgpu_container_gpu_memory_limit_bytes"] == {ctr("ns", "p", "c", UUID0, ""): GIB}
    assert series["cgpu_gpu_memory_allocated_bytes"] == {labels(gpu_uuid=UUID0, gpu_index=""): GIB}
    assert "cgpu_gpu_memory_total_bytes" not in series
    assert series["cgpu_exporter_nvml_up"][labels()] == 0


def test_unhealthy_gpu(collector: CgpuCollector, fake_nvml: FakeNvml) -> None:
    fake_nvml.fail_memory = {1}
    series = scrape(collector)
    gpu1 = labels(gpu_uuid=UUID1, gpu_index="1", model="Tesla T4")
    assert series["cgpu_gpu_healthy"][gpu1] == 0
    assert gpu1 not in series["cgpu_gpu_memory_total_bytes"]
    assert series["cgpu_exporter_nvml_up"][labels()] == 1


def test_missing_state_dir_is_empty_not_an_error(tmp_path: Path, fake_nvml: FakeNvml) -> None:
    collector = CgpuCollector(tmp_path / "nothing", gpus=NvmlSource(loader=lambda: fake_nvml))
    series = scrape(collector)
    assert "cgpu_container_gpu_memory_limit_bytes" not in series
    assert series["cgpu_exporter_scrape_duration_seconds"][labels()] >= 0


def test_identity_type_is_hashable() -> None:
    assert len({Identity("a", "b", "c"), Identity("a", "b", "c")}) == 1


def test_oversized_or_linked_meta_is_ignored(
    collector: CgpuCollector, make_container: Callable, tmp_path: Path
) -> None:
    big = make_container("big", {UUID0: GIB}, namespace="ns", pod="p", container="c")
    (big / "meta.json").write_text('{"pod": "spoofed", "pad": "' + "x" * 70000 + '"}')
    linked = make_container("linked", {UUID0: GIB})
    target = tmp_path / "elsewhere.json"
    target.write_text('{"namespace": "other", "pod": "victim", "container": "c"}')
    (linked / "meta.json").unlink()
    (linked / "meta.json").symlink_to(target)
    limits = scrape(collector)["cgpu_container_gpu_memory_limit_bytes"]
    assert set(limits) == {ctr("", "", "big", UUID0, "0"), ctr("", "", "linked", UUID0, "0")}


def test_unlistable_state_dir_is_counted(state_dir: Path, fake_nvml: FakeNvml) -> None:
    (state_dir / "containers").write_text("not a directory")
    collector = CgpuCollector(state_dir, gpus=NvmlSource(loader=lambda: fake_nvml))
    series = scrape(collector)
    assert series["cgpu_ledgers_skipped"][labels(reason="io")] == 1
    assert series["cgpu_gpu_memory_total_bytes"]  # the GPU series are still there


def test_ledger_without_devices_falls_back_to_config(
    collector: CgpuCollector, make_container: Callable
) -> None:
    from cgpu.core.ledger import init_ledger

    d = make_container("c1", {UUID0: 3 * GIB}, namespace="ns", pod="p", container="c")
    (d / LEDGER_NAME).unlink()
    init_ledger(d / LEDGER_NAME, {})  # as a shim creates it before it registers its devices
    series = scrape(collector)
    assert series["cgpu_container_gpu_memory_limit_bytes"] == {
        ctr("ns", "p", "c", UUID0, "0"): 3 * GIB
    }


def test_compute_limit_comes_from_the_config_before_any_ledger(
    collector: CgpuCollector, make_container: Callable
) -> None:
    """The compute cap is the host's cgpu.conf: exported before the container has a ledger."""
    from cgpu.core.config import write_config

    d = make_container("c1", {UUID0: GIB}, namespace="ns", pod="p", container="c")
    write_config(d, {UUID0: GIB}, {UUID0: (30, "share")})
    (d / LEDGER_NAME).unlink()
    series = scrape(collector)
    key = ctr("ns", "p", "c", UUID0, "0")
    assert series["cgpu_container_gpu_compute_limit_percent"] == {key: 30}
    assert series["cgpu_container_gpu_compute_used_percent"] == {key: 0}
    assert series["cgpu_container_gpu_memory_limit_bytes"] == {key: GIB}
