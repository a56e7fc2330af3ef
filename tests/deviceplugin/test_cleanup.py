"""Cleanup of container directories, judged by pod-resources (directories made by hand)."""

from __future__ import annotations

import json
from pathlib import Path

from cgpu.core.containers import containers_root, read_meta
from cgpu.deviceplugin.plugin.cleanup import sweep

NOW = 10_000.0


def make(state: Path, key: str, ids: list[str], created: float, **meta: str) -> Path:
    path = containers_root(state) / key
    path.mkdir(parents=True)
    record = {"key": key, "source": "device-plugin", "device_ids": ids, "created": created, **meta}
    (path / "meta.json").write_text(json.dumps(record))
    return path


def test_gone_containers_are_removed_after_the_grace(tmp_path: Path) -> None:
    make(tmp_path, "live", ["g-0", "g-1"], 0)
    make(tmp_path, "gone", ["g-2"], 0)
    make(tmp_path, "fresh", ["g-3"], NOW - 5)
    hook = containers_root(tmp_path) / "hooked"
    hook.mkdir()
    (hook / "meta.json").write_text(json.dumps({"key": "hooked", "source": "hook"}))
    devices = {("ns", "p", "c"): {"g-0", "g-1"}}
    removed = sweep(tmp_path, devices, {("ns", "p")}, grace=60, now=NOW)
    assert removed == ["gone"]
    assert sorted(p.name for p in containers_root(tmp_path).iterdir()) == [
        "fresh",
        "hooked",
        "live",
    ]


def test_a_listed_pod_keeps_its_directory(tmp_path: Path) -> None:
    # An init container's devices are not listed by pod-resources, but its pod is.
    make(tmp_path, "init", ["g-5"], 0, namespace="ns", pod="p")
    assert sweep(tmp_path, {}, {("ns", "p")}, grace=60, now=NOW) == []
    assert sweep(tmp_path, {}, set(), grace=60, now=NOW) == ["init"]


def test_adoption_records_the_pod(tmp_path: Path) -> None:
    path = make(tmp_path, "anon", ["g-0", "g-1"], NOW)
    sweep(tmp_path, {("ns", "p", "c"): {"g-0", "g-1"}}, {("ns", "p")}, grace=60, now=NOW)
    meta = read_meta(path)
    assert (meta["namespace"], meta["pod"], meta["container"]) == ("ns", "p", "c")


def test_reused_ids_retire_the_older_pod(tmp_path: Path) -> None:
    make(tmp_path, "old", ["g-0", "g-1"], 100, namespace="ns", pod="a")
    make(tmp_path, "new", ["g-1", "g-2"], 200, namespace="ns", pod="b")
    devices = {("ns", "b", "c"): {"g-1", "g-2"}}
    assert sweep(tmp_path, devices, {("ns", "a"), ("ns", "b")}, grace=1e9, now=NOW) == ["old"]


def test_same_pod_sharing_ids_is_kept(tmp_path: Path) -> None:
    # The kubelet hands an init container's devices on to the app container.
    make(tmp_path, "init", ["g-0"], 100, namespace="ns", pod="a")
    make(tmp_path, "app", ["g-0"], 200, namespace="ns", pod="a")
    assert sweep(tmp_path, {("ns", "a", "app"): {"g-0"}}, {("ns", "a")}, grace=0, now=NOW) == []
