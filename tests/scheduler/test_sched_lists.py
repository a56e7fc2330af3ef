"""Lists at scale: pages read ahead from the fake API server, and the first list's one-pass
index of the pods."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kube.objects import gpu_node, gpu_pod

from cgpu.core.kube import KubeError
from cgpu.scheduler.kubeapi import KubeApi, load_configuration
from cgpu.scheduler.pages import list_metadata
from cgpu.scheduler.state import ClusterState

IDX = "ALIYUN_COM_GPU_MEM_IDX"


def test_list_metadata_is_read_without_the_items():
    meta = {"resourceVersion": "7", "continue": "tok"}
    body = {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": [{"x": 1}]}
    assert list_metadata(json.dumps(body)) == {"resourceVersion": "7", "continue": "tok"}
    assert list_metadata(json.dumps(body, indent=2)) == body["metadata"]
    assert list_metadata(' {"metadata" : {}, "items": [}') == {}  # items never decoded
    # Items first, no metadata, not an object, malformed: the caller decodes it whole.
    assert list_metadata(json.dumps({"items": [], "metadata": {"continue": "x"}})) is None
    assert list_metadata(json.dumps({"kind": "PodList", "items": []})) is None
    for text in ("[]", "", '{"metadata": [1]}', '{"kind": }', '{"kind": "x" "metadata": {}}'):
        assert list_metadata(text) is None


def pods_api(kube_api, tmp_path, count: int) -> KubeApi:
    kube_api.create("nodes", gpu_node("n1", 8, 80))
    for i in range(count):
        kube_api.create("pods", gpu_pod(f"p{i}", 1, node="n1", annotations={IDX: str(i % 8)},
                                        phase="Running"))  # fmt: skip
    return KubeApi(load_configuration(str(kube_api.kubeconfig(tmp_path / "kc"))), timeout=5.0)


def test_a_list_in_pages_gives_every_item_once_in_order(kube_api, tmp_path):
    api = pods_api(kube_api, tmp_path, 7)
    listing = api.list("pods", page=2)
    names = [p["metadata"]["name"] for p in listing]
    assert names == [f"p{i}" for i in range(7)]
    assert listing.resource_version == str(kube_api.store.rv)
    assert kube_api.requests.count(("GET", "/api/v1/pods")) == 4


def test_a_page_that_fails_once_is_asked_again_not_the_whole_list(kube_api, tmp_path):
    api = pods_api(kube_api, tmp_path, 5)
    listing = iter(api.list("pods", page=2))
    assert next(listing)["metadata"]["name"] == "p0"
    kube_api.fault("GET", "/api/v1/pods", 503)  # the read-ahead may hold page 2 already
    assert [p["metadata"]["name"] for p in listing] == ["p1", "p2", "p3", "p4"]


def test_an_expired_continue_token_is_raised_in_order(kube_api, tmp_path):
    api = pods_api(kube_api, tmp_path, 5)
    kube_api.continues.clear()
    seen = []
    kube_api.hooks.append(lambda method, path: kube_api.continues.clear())
    with pytest.raises(KubeError) as caught:
        for pod in api.list("pods", page=2):
            seen.append(pod["metadata"]["name"])
    assert caught.value.status == 410
    assert seen == ["p0", "p1"]  # the first page, then the error where page 2 would be


def test_leaving_a_list_early_stops_its_reader(kube_api, tmp_path):
    api = pods_api(kube_api, tmp_path, 20)

    def readers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("read-ahead")]

    for _ in api.list("pods", page=1):
        assert readers()
        break
    deadline = time.monotonic() + 5
    while readers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not readers()
    assert kube_api.requests.count(("GET", "/api/v1/pods")) <= 4  # not all 20 pages


def test_the_first_lists_one_pass_index_equals_the_pod_by_pod_one():
    nodes = [gpu_node(f"n{i}", 4, 10) for i in range(3)]
    pods = []
    for i in range(40):
        pod = gpu_pod(f"p{i}", 1 + i % 3, node=f"n{i % 3}", phase="Running",
                      annotations={IDX: str(i % 4)} if i % 5 else {})  # fmt: skip
        pod["metadata"]["uid"] = f"u{i}"
        pods.append(pod)
    pods[7]["status"]["phase"] = "Succeeded"
    states = []
    for offline in (False, True):
        state = ClusterState()
        state.replace_nodes(nodes)
        state.replace_pods(pods, offline=offline)
        states.append(state)
    online, offline_ = states
    assert online.inspect() == offline_.inspect()
    for name in online.nodes:
        assert online.nodes[name].view == offline_.nodes[name].view
    assert offline_.nodes["n1"].view.free != (10, 10, 10, 10)  # the pods were counted
