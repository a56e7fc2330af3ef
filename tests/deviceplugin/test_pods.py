"""Which pod container an Allocate call is for, from recorded API-server JSON."""

from __future__ import annotations

import pytest
from kube.recorded import load

from cgpu.deviceplugin.kube.pods import PodError, match_container, parse_pod, pod_complete

RES = "aliyun.com/gpu-mem"


def pods(name: str, node: str = "node-1"):
    items = load(name)["items"]
    return [parse_pod(p, RES) for p in items if p["spec"]["nodeName"] == node]


def test_gpu_count_label() -> None:
    (running, pod) = pods("pods_gpucount.json")
    assert pod.gpu_count == 4 and pod.total_units == 8
    assert match_container([running, pod], 8, set()) == (pod, pod.containers[0])
    assert match_container([running, pod], 2, set()) is None  # the running pod is not pending


def test_gpushare_annotations() -> None:
    (_, pod) = pods("pods_gpushare.json")
    assert pod.pinned == [1] and not pod.assigned and pod.total_units == 4
    assert pod.order[0] == pytest.approx(1732093800.123456789)


def test_multi_container_pod_matched_per_container_in_kubelet_order() -> None:
    (_, pod) = pods("pods_multicontainer.json")
    done: set[tuple[str, str]] = set()
    names = []
    for units in (1, 3, 2):
        pod_, container = match_container([pod], units, done)
        names.append(container.name)
        done.add((pod_.uid, container.name))
    assert names == ["fetch", "trainer", "evaluator"]
    assert pod_complete(pod, done)
    assert match_container([pod], 2, done) is None
    assert pod.total_units == 5


def test_bad_label_and_annotation_are_errors() -> None:
    raw = load("pods_gpucount.json")["items"][2]
    raw["metadata"]["labels"]["aliyun.com/gpu-count"] = "two"
    raw["metadata"]["annotations"] = {"ALIYUN_COM_GPU_MEM_IDX": "x"}
    bad = parse_pod(raw, RES)
    with pytest.raises(PodError, match="gpu-count"):
        _ = bad.gpu_count
    with pytest.raises(PodError, match="ALIYUN_COM_GPU_MEM_IDX"):
        _ = bad.pinned
