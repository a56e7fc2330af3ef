"""XID health through the simulator's CGPU_SIM_FAULTS file, seen on the ListAndWatch stream."""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import grpc
from plugin_harness import UUIDS


def _append(path: Path, line: str) -> None:
    with open(path, "a") as handle:
        handle.write(line + "\n")


def test_critical_xid_marks_one_gpu_unhealthy_and_back(start_plugin, dp_root: Path) -> None:
    faults = dp_root / "faults"
    faults.write_text("")
    plugin = start_plugin("--health-recovery", "2", memory="2GiB", faults=str(faults))
    plugin.wait_log("watching XID events on 2 GPUs")
    updates: queue.Queue[list[tuple[str, str]]] = queue.Queue()

    def watch() -> None:
        try:
            for devices in plugin.reconnect().watch():
                updates.put(devices)
        except grpc.RpcError:
            pass  # the stream ends when the test stops the plugin

    threading.Thread(target=watch, daemon=True).start()
    first = updates.get(timeout=10)
    assert {h for _, h in first} == {"Healthy"} and len(first) == 4

    _append(faults, "1 13")  # application errors: the GPU is fine
    _append(faults, f"{UUIDS[1]} 43")
    plugin.wait_log("XID 43 is an application error")
    assert updates.empty()

    _append(faults, f"{UUIDS[1]} 79")  # fallen off the bus
    marked = updates.get(timeout=10)
    assert marked == [
        (f"{UUIDS[0]}-0", "Healthy"),
        (f"{UUIDS[0]}-1", "Healthy"),
        (f"{UUIDS[1]}-0", "Unhealthy"),
        (f"{UUIDS[1]}-1", "Unhealthy"),
    ]
    assert "critical XID 79" in plugin.log()

    recovered = updates.get(timeout=10)  # after --health-recovery seconds without a fault
    assert {h for _, h in recovered} == {"Healthy"}
    assert "Healthy again" in plugin.log()
