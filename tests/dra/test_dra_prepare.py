"""NodePrepareResources and NodeUnprepareResources over real gRPC, claims allocated by the
scheduler's stand-in in the fake API server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dra_helpers import NODE, UUIDS, claim_body

from cgpu.core.config import load_compute, load_config, load_contexts
from cgpu.core.containers import read_meta

GiB = 1 << 30
POD = ("trainer", "0c8e9a2e-3b5d-4f7e-9a51-6f0d2c1b7a10")


def _claim(kube_api, scheduler, name: str, **request: Any) -> tuple[str, str, str]:
    created = kube_api.create("resourceclaims", claim_body(name, **request))
    scheduler.allocate("default", name, POD)
    return ("default", created["metadata"]["uid"], name)


def _container_dir(driver, uid: str) -> Path:
    return driver.state_dir / "containers" / f"dra-{uid}"


def _spec(driver, uid: str) -> dict[str, Any]:
    return json.loads((driver.cdi_dir / f"gpu.cgpu.io-claim_{uid}.json").read_text())


def test_prepare_writes_the_nodes_context_cost(start_driver, peer, kube_api, scheduler) -> None:
    driver = start_driver(ctx_overhead="96MiB")  # measured once, at start-up
    peer.register()
    ref = _claim(kube_api, scheduler, "ctx", memory="4Gi")
    assert peer.prepare(ref)[ref[1]]["error"] == ""
    conf = _container_dir(driver, ref[1]) / "cgpu.conf"
    assert load_contexts(conf) == {UUIDS[0]: 96 << 20}
    cache = json.loads((driver.state_dir / "context-cost.json").read_text())
    assert cache["costs"] == {UUIDS[0]: 96 << 20, UUIDS[1]: 96 << 20}


def test_prepare_gives_the_claim_its_slice_through_cdi(
    start_driver, peer, kube_api, scheduler
) -> None:
    driver = start_driver()
    peer.register()
    ref = _claim(kube_api, scheduler, "slice", memory="4Gi", compute="30")
    uid = ref[1]
    answer = peer.prepare(ref)[uid]
    assert answer["error"] == ""
    (device,) = answer["devices"]
    (allocated,) = kube_api.get("resourceclaims", "slice", "default")["status"]["allocation"][
        "devices"
    ]["results"]
    assert device == {
        "request_names": ["gpu"],
        "pool_name": NODE,
        "device_name": "gpu-0",
        "cdi_device_ids": [f"gpu.cgpu.io/claim={uid}"],
        "share_id": allocated["shareID"],  # which share of the device this is
    }
    directory = _container_dir(driver, uid)
    assert load_config(directory / "cgpu.conf") == {UUIDS[0]: 4 * GiB}  # the shim's parser
    assert load_compute(directory / "cgpu.conf") == {UUIDS[0]: (30, "fixed")}
    meta = read_meta(directory)
    assert (meta["namespace"], meta["pod"], meta["claim"]) == ("default", POD[0], "slice")
    spec = _spec(driver, uid)
    assert spec["kind"] == "gpu.cgpu.io/claim"
    (cdi_device,) = spec["devices"]
    assert cdi_device["name"] == uid
    edits = cdi_device["containerEdits"]
    assert "CGPU_LEDGER_DIR=/var/run/cgpu" in edits["env"]
    assert f"NVIDIA_VISIBLE_DEVICES={UUIDS[0]}" in edits["env"]
    mounts = {m["containerPath"]: m for m in edits["mounts"]}
    assert set(mounts) == {
        "/usr/local/cgpu/libcgpu.so",
        "/etc/ld.so.preload",
        "/var/run/cgpu",
        "/var/run/cgpu/cgpu.ledger",
    }
    assert mounts["/var/run/cgpu"]["hostPath"] == str(directory)
    assert "ro" in mounts["/var/run/cgpu"]["options"]
    assert "ro" not in mounts["/var/run/cgpu/cgpu.ledger"]["options"]
    for mount in edits["mounts"]:
        assert Path(mount["hostPath"]).exists(), mount
    for node in edits.get("deviceNodes", []):
        assert Path(node["hostPath"]).exists(), node  # only device nodes the host has


def test_two_claims_share_a_gpu_each_with_its_own_slice(
    start_driver, peer, kube_api, scheduler
) -> None:
    driver = start_driver(devices=1)
    peer.register()
    small = _claim(kube_api, scheduler, "small", memory="1000Mi")  # rounded up to 1 GiB
    large = _claim(kube_api, scheduler, "large", memory="12Gi")
    answers = peer.prepare(small, large)
    assert {a["devices"][0]["device_name"] for a in answers.values()} == {"gpu-0"}
    assert load_config(_container_dir(driver, small[1]) / "cgpu.conf") == {UUIDS[0]: GiB}
    assert load_config(_container_dir(driver, large[1]) / "cgpu.conf") == {UUIDS[0]: 12 * GiB}


def test_a_claim_over_two_gpus_gets_a_slice_on_each(
    start_driver, peer, kube_api, scheduler
) -> None:
    driver = start_driver()
    peer.register()
    ref = _claim(kube_api, scheduler, "pair", memory="10Gi", count=2)  # 2 x 10 GiB: two GPUs
    answer = peer.prepare(ref)[ref[1]]
    assert sorted(d["device_name"] for d in answer["devices"]) == ["gpu-0", "gpu-1"]
    assert {cdi for d in answer["devices"] for cdi in d["cdi_device_ids"]} == {
        f"gpu.cgpu.io/claim={ref[1]}"
    }  # one CDI device per claim
    directory = _container_dir(driver, ref[1])
    assert load_config(directory / "cgpu.conf") == {UUIDS[0]: 10 * GiB, UUIDS[1]: 10 * GiB}
    env = _spec(driver, ref[1])["devices"][0]["containerEdits"]["env"]
    assert f"NVIDIA_VISIBLE_DEVICES={UUIDS[0]},{UUIDS[1]}" in env


def test_prepare_is_idempotent_and_survives_a_restart(
    start_driver, peer, kube_api, scheduler
) -> None:
    driver = start_driver()
    peer.register()
    ref = _claim(kube_api, scheduler, "kept", memory="2Gi")
    first = peer.prepare(ref)
    ledger = _container_dir(driver, ref[1]) / "cgpu.ledger"
    inode = ledger.stat().st_ino
    assert peer.prepare(ref) == first
    assert ledger.stat().st_ino == inode  # not made again: running containers keep their ledger
    driver.stop()
    kube_api.delete("resourceclaims", "kept")  # a restarted driver need not read it again
    restarted = start_driver()
    peer.close()
    peer.register()
    assert peer.prepare(ref) == first
    assert ledger.stat().st_ino == inode
    assert peer.unprepare(ref) == {ref[1]: ""}
    assert not _container_dir(restarted, ref[1]).exists()
    assert not (restarted.cdi_dir / f"gpu.cgpu.io-claim_{ref[1]}.json").exists()
    checkpoint = json.loads((restarted.state_dir / "dra" / "checkpoint.json").read_text())
    assert ref[1] not in checkpoint["claims"]
    assert peer.unprepare(ref) == {ref[1]: ""}  # again: nothing to undo, no error


def _edit_result(kube_api, name: str, **change: Any) -> None:
    def apply(claim: dict[str, Any]) -> dict[str, Any]:
        claim["status"]["allocation"]["devices"]["results"][0].update(change)
        return claim

    kube_api.update("resourceclaims", name, apply, "default")


BAD_RESULTS = [
    ({"device": "gpu-7"}, "no device 'gpu-7' on this node"),
    ({"consumedCapacity": {"memory": "17Gi", "compute": "0"}}, "which has 17179869184"),
    ({"consumedCapacity": {"memory": "4Gx"}}, "malformed quantity '4Gx'"),
    ({"consumedCapacity": {"memory": "4Gi", "compute": "150"}}, "not 0 to 100 percent"),
    ({"consumedCapacity": {"compute": "10"}}, "consumedCapacity on device gpu-0 has no memory"),
    ({"pool": "node-9"}, "pool 'node-9' is not this node's"),
    ({"driver": "gpu.nvidia.com"}, "has no device of driver gpu.cgpu.io"),
]


def test_a_claim_it_cannot_honour_fails_alone_with_a_clear_error(
    start_driver, peer, kube_api, scheduler
) -> None:
    driver = start_driver()
    peer.register()
    bad = [_claim(kube_api, scheduler, f"bad-{n}", memory="2Gi") for n in range(len(BAD_RESULTS))]
    good = _claim(kube_api, scheduler, "good", memory="4Gi")
    for ref, (change, _) in zip(bad, BAD_RESULTS, strict=True):
        _edit_result(kube_api, ref[2], **change)
    answers = peer.prepare(*bad, good)
    for ref, (_, message) in zip(bad, BAD_RESULTS, strict=True):
        assert message in answers[ref[1]]["error"], (ref, answers[ref[1]])
        assert not _container_dir(driver, ref[1]).exists()
        assert not (driver.cdi_dir / f"gpu.cgpu.io-claim_{ref[1]}.json").exists()
    assert answers[good[1]]["error"] == ""
    assert list(load_config(_container_dir(driver, good[1]) / "cgpu.conf").values()) == [4 * GiB]


def test_unallocated_missing_and_mismatched_claims_are_refused(
    start_driver, peer, kube_api
) -> None:
    start_driver()
    peer.register()
    pending = kube_api.create("resourceclaims", claim_body("pending"))
    uid = pending["metadata"]["uid"]
    answers = peer.prepare(
        ("default", uid, "pending"),
        ("default", "f00d", "missing"),
        ("default", "0bad", "pending"),
        ("default", "../../etc", "pending"),
    )
    assert "is not allocated" in answers[uid]["error"]
    assert "404" in answers["f00d"]["error"]
    assert "is not the kubelet's '0bad'" in answers["0bad"]["error"]
    assert "malformed uid '../../etc'" in answers["../../etc"]["error"]
    assert "malformed uid" in peer.unprepare(("default", "../../etc", "pending"))["../../etc"]
