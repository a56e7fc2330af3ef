"""The request a container makes: limit variables, GPU selection, OCI state and annotations."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from cgpu.core.gpus import GPU
from cgpu.hooks.devices import container_gpus, cuda_order, slices
from cgpu.hooks.errors import RequestError
from cgpu.hooks.hook import requested_slices
from cgpu.hooks.oci import labels, read_spec, read_state
from cgpu.hooks.request import Fixed, Share, parse_request

GIB = 1 << 30
GPUS = [GPU(i, f"GPU-5eed0000-0000-4000-8000-00000000000{i}", "sim", 16 * GIB) for i in range(3)]
ALIYUN_4_OF_15 = {"ALIYUN_COM_GPU_MEM_CONTAINER": "4", "ALIYUN_COM_GPU_MEM_DEV": "15"}


def test_no_variables_is_no_request() -> None:
    assert parse_request({"PATH": "/bin", "NVIDIA_VISIBLE_DEVICES": "all"}) is None
    assert requested_slices({"PATH": "/bin"}, lambda: GPUS) == {}


def test_sources_in_the_shims_order() -> None:
    env = {"CGPU_MEM_LIMIT": "2GiB", "CGPU_MEM_LIMIT_1": "1024M", **ALIYUN_4_OF_15}
    # The share is kept for ordinals without a fixed size of their own (none here).
    assert parse_request(env) == Fixed(default=2 * GIB, by_ordinal={1: GIB}, share=Share(4, 15))
    volcano = {"VOLCANO_GPU_ALLOCATED": "2048", "VOLCANO_GPU_MEMORY_TOTAL": "16384"}
    assert parse_request({**ALIYUN_4_OF_15, **volcano}) == Share(4, 15)
    assert parse_request(volcano) == Share(2048, 16384)


UNITS, OF = "ALIYUN_COM_GPU_MEM_CONTAINER", "ALIYUN_COM_GPU_MEM_DEV"
VOLCANO_UNITS, VOLCANO_OF = "VOLCANO_GPU_ALLOCATED", "VOLCANO_GPU_MEMORY_TOTAL"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"CGPU_MEM_LIMIT": "lots"}, "CGPU_MEM_LIMIT"),
        ({"CGPU_MEM_LIMIT": "0"}, "CGPU_MEM_LIMIT"),
        ({"CGPU_MEM_LIMIT_2": "1QiB"}, "CGPU_MEM_LIMIT_2"),
        ({"CGPU_MEM_LIMIT_16": "1GiB"}, "CGPU_MEM_LIMIT_16"),  # ordinals are 0-15
        ({UNITS: "4"}, OF),
        ({UNITS: "-1", OF: "4"}, UNITS),
        ({UNITS: "5", OF: "4"}, UNITS),
        ({UNITS: "1", OF: "0"}, OF),
        ({VOLCANO_UNITS: "1.5", VOLCANO_OF: "4"}, VOLCANO_UNITS),
        # Refused even though a higher source overrides it: the shim refuses it too.
        ({"CGPU_MEM_LIMIT": "2GiB", UNITS: "x", OF: "15"}, UNITS),
    ],
)
def test_malformed_values_name_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(RequestError, match=named) as info:
        parse_request(env)
    assert info.value.variable == named
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("value", ["true", "TRUE", " True ", "1", "yes", "Yes"])
def test_disable_is_gpushares_escape_hatch(value: str) -> None:
    # CGPU_DISABLE wins over everything, malformed variables included.
    env = {"CGPU_DISABLE": value, "CGPU_MEM_LIMIT": "lots", **ALIYUN_4_OF_15}
    assert parse_request(env) is None
    assert requested_slices(env, lambda: GPUS) == {}


@pytest.mark.parametrize("value", ["false", "0", "no", "", "on"])
def test_other_disable_values_keep_the_limit(value: str) -> None:
    env = {"CGPU_DISABLE": value, "CGPU_MEM_LIMIT": "1GiB"}
    assert requested_slices(env, lambda: GPUS[:1]) == {GPUS[0].uuid: GIB}


def test_visible_devices() -> None:
    for value in (None, "", "all", "void"):
        env = {} if value is None else {"NVIDIA_VISIBLE_DEVICES": value}
        assert container_gpus(env, GPUS) == GPUS
    assert container_gpus({"NVIDIA_VISIBLE_DEVICES": "none"}, GPUS) == []
    env = {"NVIDIA_VISIBLE_DEVICES": f"2,{GPUS[0].uuid}"}
    assert container_gpus(env, GPUS) == [GPUS[0], GPUS[2]]
    # A CDI device's variables win over NVIDIA_VISIBLE_DEVICES.
    env = {"NVIDIA_VISIBLE_DEVICES": "void", "CGPU_CDI_DEVICE_1": GPUS[1].uuid}
    assert container_gpus(env, GPUS) == [GPUS[1]]
    for bad in ("7", "GPU-nope", "0:1", "../0"):
        with pytest.raises(RequestError, match="NVIDIA_VISIBLE_DEVICES"):
            container_gpus({"NVIDIA_VISIBLE_DEVICES": bad}, GPUS)


def test_cuda_visible_devices_maps_ordinals() -> None:
    assert cuda_order({"CUDA_VISIBLE_DEVICES": "2,0"}, GPUS) == [GPUS[2], GPUS[0]]
    assert cuda_order({"CUDA_VISIBLE_DEVICES": "1,9,0"}, GPUS) == [GPUS[1]]  # stops at 9
    assert cuda_order(
        {"CUDA_VISIBLE_DEVICES": "GPU-5eed0000-0000-4000-8000-000000000002"}, GPUS
    ) == [GPUS[2]]
    assert cuda_order({"CUDA_VISIBLE_DEVICES": "GPU-5eed,1"}, GPUS) == []  # ambiguous prefix


def test_slices() -> None:
    # 4 of 15 units on a 16130 MiB V100 is 4301 MiB (the contract's example, gpushare's seed).
    v100 = [GPU(0, "GPU-v100", "V100", 16130 << 20)]
    assert slices(Share(4, 15), v100, {}) == {"GPU-v100": (16130 << 20) * 4 // 15}
    assert slices(Share(4, 15), v100, {})["GPU-v100"] >> 20 == 4301
    # CGPU_MEM_LIMIT_<i> is by CUDA ordinal: with CUDA_VISIBLE_DEVICES=1, ordinal 0 is GPU 1.
    request = Fixed(default=GIB, by_ordinal={0: 2 * GIB})
    env = {"CUDA_VISIBLE_DEVICES": "1"}
    assert slices(request, GPUS[:2], env) == {GPUS[0].uuid: GIB, GPUS[1].uuid: 2 * GIB}
    assert slices(Fixed(None, {1: GIB}), GPUS, {}) == {GPUS[1].uuid: GIB}
    # A limit for an ordinal the container does not have limits nothing (as in the shim).
    assert slices(Fixed(None, {3: GIB}), GPUS, {}) == {}


def test_fixed_falls_back_to_the_share() -> None:
    env = {"CGPU_MEM_LIMIT_1": "1GiB", **ALIYUN_4_OF_15}
    share = 16 * GIB * 4 // 15
    assert requested_slices(env, lambda: GPUS) == {
        GPUS[0].uuid: share,
        GPUS[1].uuid: GIB,
        GPUS[2].uuid: share,
    }


def test_requested_slices_follow_the_visible_devices() -> None:
    env = {"CGPU_MEM_LIMIT": "2GiB", "CGPU_MEM_LIMIT_0": "1GiB", "NVIDIA_VISIBLE_DEVICES": "2"}
    assert requested_slices(env, lambda: GPUS) == {GPUS[2].uuid: GIB}
    with pytest.raises(RequestError, match="NVIDIA_VISIBLE_DEVICES") as info:
        requested_slices({**env, "NVIDIA_VISIBLE_DEVICES": "7"}, lambda: GPUS)
    assert info.value.variable is None


def _state(**fields: object) -> io.BytesIO:
    base: dict[str, object] = {"ociVersion": "1.0.2", "id": "abc", "pid": 42, "bundle": "/b"}
    return io.BytesIO(json.dumps({**base, **fields}).encode())


def test_read_state_validates() -> None:
    state = read_state(_state(status="creating", annotations={"a": "b"}))
    assert (state.id, state.pid, state.status, state.annotations) == (
        "abc",
        42,
        "creating",
        {"a": "b"},
    )
    for bad in ({"id": "../../etc"}, {"id": "a/b"}, {"id": 7}, {"pid": "1"}, {"annotations": []}):
        with pytest.raises(RequestError):
            read_state(_state(**bad))
    with pytest.raises(RequestError, match="not JSON"):
        read_state(io.BytesIO(b"{"))


def test_read_spec(tmp_path: Path) -> None:
    config = {
        "root": {"path": "rootfs"},
        "process": {"env": ["A=1", "A=2", "B=x=y", "junk"]},
        "annotations": {"io.kubernetes.pod.name": "p"},
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = read_spec(str(tmp_path))
    assert spec.rootfs == str(tmp_path / "rootfs")
    assert spec.env == {"A": "1", "B": "x=y"}  # the first of duplicates, as getenv sees it
    with pytest.raises(RequestError, match="absolute"):
        read_spec("relative/bundle")


def test_labels_from_cri_annotations() -> None:
    crio = {
        "io.kubernetes.pod.namespace": "ns",
        "io.kubernetes.pod.name": "pod-1",
        "io.kubernetes.container.name": "main",
    }
    assert labels(crio) == {"namespace": "ns", "pod": "pod-1", "container": "main"}
    containerd = {
        "io.kubernetes.cri.sandbox-namespace": "ns",
        "io.kubernetes.cri.sandbox-name": "pod-2",
        "io.kubernetes.cri.container-name": "side",
    }
    assert labels(containerd) == {"namespace": "ns", "pod": "pod-2", "container": "side"}
    assert labels({}) == {}
    with pytest.raises(RequestError, match=r"io\.kubernetes\.pod\.name"):
        labels({"io.kubernetes.pod.name": 'x"\n}'})
