"""The fake API server, driven by the official `kubernetes` client as the components drive it."""

from __future__ import annotations

import json
import threading

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from kube.apiserver import FakeApiServer
from kube.objects import gpu_node, gpu_pod


def client_for(server: FakeApiServer, kubeconfig) -> client.CoreV1Api:
    """The official client, configured from a kubeconfig that names `server`."""
    configuration = client.Configuration()
    config.load_kube_config(
        config_file=str(server.kubeconfig(kubeconfig)), client_configuration=configuration
    )
    return client.CoreV1Api(client.ApiClient(configuration))


@pytest.fixture
def core(kube_api: FakeApiServer, tmp_path) -> client.CoreV1Api:
    return client_for(kube_api, tmp_path / "kc")


def test_list_get_and_selectors(kube_api, core) -> None:
    kube_api.create("nodes", gpu_node("n1", 2, 8))
    kube_api.create("pods", gpu_pod("a", 1, node="n1", phase="Running", labels={"app": "x"}))
    kube_api.create("pods", gpu_pod("b", 1, namespace="ml", labels={"app": "y"}))
    kube_api.create("pods", gpu_pod("c", 1, node="n1", phase="Succeeded"))

    pods = core.list_pod_for_all_namespaces()
    assert sorted(p.metadata.name for p in pods.items) == ["a", "b", "c"]
    assert int(pods.metadata.resource_version) >= max(
        int(p.metadata.resource_version) for p in pods.items
    )
    on_node = core.list_pod_for_all_namespaces(
        field_selector="spec.nodeName=n1,status.phase!=Succeeded"
    )
    assert [p.metadata.name for p in on_node.items] == ["a"]
    assert [p.metadata.name for p in core.list_namespaced_pod("ml").items] == ["b"]
    labelled = core.list_pod_for_all_namespaces(label_selector="app in (x,z)")
    assert [p.metadata.name for p in labelled.items] == ["a"]
    assert core.read_node("n1").status.allocatable["aliyun.com/gpu-mem"] == "16"
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("nope", "default")
    assert err.value.status == 404
    with pytest.raises(ApiException) as err:
        core.list_pod_for_all_namespaces(field_selector="spec.bogus=1")
    assert err.value.status == 400


def test_patch_kinds_and_conflicts(kube_api, core) -> None:
    kube_api.create("pods", gpu_pod("a", 1))
    pod = core.read_namespaced_pod("a", "default")
    # A dict body goes as a strategic merge patch.
    core.patch_namespaced_pod("a", "default", {"metadata": {"annotations": {"k": "v"}}})
    # A merge patch with null deletes; a stale resourceVersion conflicts.
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod(
            "a",
            "default",
            {"metadata": {"resourceVersion": pod.metadata.resource_version, "labels": {"x": "1"}}},
            _content_type="application/merge-patch+json",
        )
    assert err.value.status == 409
    fresh = core.read_namespaced_pod("a", "default")
    core.patch_namespaced_pod(
        "a",
        "default",
        {
            "metadata": {
                "resourceVersion": fresh.metadata.resource_version,
                "annotations": {"k": None},
            }
        },
        _content_type="application/merge-patch+json",
    )
    # JSON patch (a list body).
    core.patch_namespaced_pod(
        "a", "default", [{"op": "add", "path": "/metadata/labels/j", "value": "2"}]
    )
    final = kube_api.get("pods", "a")
    assert final["metadata"].get("annotations") == {}
    assert final["metadata"]["labels"] == {"j": "2"}
    assert int(final["metadata"]["resourceVersion"]) > int(fresh.metadata.resource_version)


def test_binding_sets_node_once(kube_api, core) -> None:
    kube_api.create("pods", gpu_pod("a", 1))
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name="a"),
        target=client.V1ObjectReference(kind="Node", name="n1", api_version="v1"),
    )
    core.create_namespaced_pod_binding("a", "default", body, _preload_content=False)
    assert kube_api.get("pods", "a")["spec"]["nodeName"] == "n1"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_binding("a", "default", body, _preload_content=False)
    assert err.value.status == 409


def test_watch_streams_changes_and_deletes(kube_api, core) -> None:
    kube_api.create("pods", gpu_pod("a", 1))
    rv = core.list_pod_for_all_namespaces().metadata.resource_version
    seen: list[tuple[str, str]] = []
    done = threading.Event()

    def consume() -> None:
        w = watch.Watch()
        for event in w.stream(
            core.list_pod_for_all_namespaces, resource_version=rv, timeout_seconds=5
        ):
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 3:
                w.stop()
        done.set()

    thread = threading.Thread(target=consume)
    thread.start()
    kube_api.create("pods", gpu_pod("b", 1))
    kube_api.set_phase("a", "Running")
    core.delete_namespaced_pod("b", "default")
    assert done.wait(10)
    assert seen == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]


def test_watch_with_selector_turns_updates_into_adds_and_deletes(kube_api, core) -> None:
    kube_api.create("pods", gpu_pod("a", 1))
    rv = core.list_pod_for_all_namespaces().metadata.resource_version
    kube_api.set_phase("a", "Running")
    kube_api.set_phase("a", "Succeeded")
    reply = core.list_pod_for_all_namespaces(
        watch=True,
        resource_version=rv,
        field_selector="status.phase=Running",
        timeout_seconds=1,
        _preload_content=False,
    )
    events = [json.loads(line) for line in reply.data.splitlines() if line.strip()]
    assert [e["type"] for e in events] == ["ADDED", "DELETED"]


def test_too_old_resource_version_is_gone(kube_api, core) -> None:
    kube_api.create("pods", gpu_pod("a", 1))
    rv = core.list_pod_for_all_namespaces().metadata.resource_version
    kube_api.set_phase("a", "Running")
    kube_api.store.compact()
    reply = core.list_pod_for_all_namespaces(
        watch=True, resource_version=rv, timeout_seconds=1, _preload_content=False
    )
    (event,) = [json.loads(line) for line in reply.data.splitlines() if line.strip()]
    assert event["type"] == "ERROR" and event["object"]["code"] == 410


def test_paginated_list_is_one_snapshot(kube_api, core) -> None:
    for i in range(7):
        kube_api.create("pods", gpu_pod(f"p{i}", 1))
    first = core.list_pod_for_all_namespaces(limit=3)
    assert len(first.items) == 3 and first.metadata._continue
    kube_api.create("pods", gpu_pod("late", 1))  # not part of the snapshot being paged
    names = [p.metadata.name for p in first.items]
    token = first.metadata._continue
    while token:
        page = core.list_pod_for_all_namespaces(limit=3, _continue=token)
        assert page.metadata.resource_version == first.metadata.resource_version
        names += [p.metadata.name for p in page.items]
        token = page.metadata._continue
    assert sorted(names) == [f"p{i}" for i in range(7)]


def test_node_status_patch_merges_keeps_spec_and_is_recorded(kube_api, core) -> None:
    node = gpu_node("n1", 2, 8)
    node["spec"] = {"unschedulable": True}
    node["metadata"]["annotations"] = {"keep": "1", "drop": "x"}
    kube_api.create("nodes", node)
    body = {
        "metadata": {"annotations": {"drop": None, "new": "2"}},
        "status": {"capacity": {"volcano.sh/gpu-number": "2"}},
        "spec": {"unschedulable": False},  # the status subresource ignores spec
    }
    core.patch_node_status("n1", body)  # the client sends a strategic merge patch

    stored = kube_api.get("nodes", "n1")
    assert stored["metadata"]["annotations"] == {"keep": "1", "new": "2"}
    assert stored["status"]["capacity"]["volcano.sh/gpu-number"] == "2"
    assert stored["status"]["capacity"]["aliyun.com/gpu-mem"] == "16"  # merged, not replaced
    assert stored["spec"] == {"unschedulable": True}
    (patch,) = kube_api.recorded_patches("/nodes/")
    assert patch["path"] == "/api/v1/nodes/n1/status"
    assert patch["content_type"] == "application/strategic-merge-patch+json"
    assert patch["body"] == body


def test_recorded_lists_are_served(recorded_api, tmp_path) -> None:
    server = recorded_api("pods_volcano.json", "node.json")
    core = client_for(server, tmp_path / "kc")
    assert server.get("nodes", "node-1")["status"]["capacity"]["cpu"] == "64"
    recorded = {p["metadata"]["name"] for p in server.pods()}
    listed = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-1")
    assert {p.metadata.name for p in listed.items} <= recorded
    assert "gpu-small-0" in {p.metadata.name for p in listed.items}
