"""The running plugin removes directories of containers pod-resources no longer lists."""

from __future__ import annotations

import json
import time
from pathlib import Path

from fake_kubelet import FakePodResources
from plugin_harness import UUIDS

RES = "aliyun.com/gpu-mem"


def ledger_dir(resp: dict) -> Path:
    return Path(
        next(m["host_path"] for m in resp["mounts"] if m["container_path"] == "/var/run/cgpu")
    )


def test_gone_containers_are_cleaned_up(start_plugin, dp_root: Path) -> None:
    pod_resources = FakePodResources(dp_root / "pod-resources.sock")
    try:
        kept_ids = [f"{UUIDS[0]}-0", f"{UUIDS[0]}-1"]
        pod_resources.pods = [("ml", "trainer-0", [("main", RES, kept_ids), ("sidecar", RES, [])])]
        plugin = start_plugin("--cleanup-interval", "0.2", "--cleanup-grace", "0", memory="8GiB")
        kept, gone = plugin.client.allocate(kept_ids, [f"{UUIDS[1]}-0"])
        kept_dir, gone_dir = ledger_dir(kept), ledger_dir(gone)
        deadline = time.monotonic() + 10
        while gone_dir.exists():
            assert time.monotonic() < deadline, plugin.log()
            time.sleep(0.1)
        assert kept_dir.is_dir()
        meta = json.loads((kept_dir / "meta.json").read_text())
        assert (meta["namespace"], meta["pod"], meta["container"]) == ("ml", "trainer-0", "main")
        plugin.wait_log("its devices are no longer held by any container")

        # The pod goes away too.
        pod_resources.pods = []
        deadline = time.monotonic() + 10
        while kept_dir.exists():
            assert time.monotonic() < deadline, plugin.log()
            time.sleep(0.1)
    finally:
        pod_resources.stop()


def test_nothing_is_removed_without_pod_resources(start_plugin) -> None:
    plugin = start_plugin("--cleanup-interval", "0.2", "--cleanup-grace", "0", memory="8GiB")
    (resp,) = plugin.client.allocate([f"{UUIDS[0]}-0"])
    time.sleep(1.0)
    assert ledger_dir(resp).is_dir()
