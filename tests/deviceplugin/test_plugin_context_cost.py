"""The plugin measures what a CUDA context costs once at start-up and writes it in cgpu.conf."""

from __future__ import annotations

import json
from pathlib import Path

from plugin_harness import COMPUTE, UUIDS

from cgpu.core.config import load_config, load_contexts

LEDGER = "/var/run/cgpu"
MIB = 1 << 20


def directory(resp: dict) -> Path:
    return Path(next(m["host_path"] for m in resp["mounts"] if m["container_path"] == LEDGER))


def test_every_container_gets_the_nodes_context_cost(start_plugin) -> None:
    plugin = start_plugin(memory="16GiB", ctx_overhead="96MiB")
    cache = json.loads((plugin.state_dir / "context-cost.json").read_text())
    assert cache["costs"] == {UUIDS[0]: 96 * MIB, UUIDS[1]: 96 * MIB}
    (memory,) = plugin.client.allocate([f"{UUIDS[1]}-0", f"{UUIDS[1]}-1"])
    conf = directory(memory) / "cgpu.conf"
    assert load_config(conf) == {UUIDS[1]: 2 << 30}
    assert load_contexts(conf) == {UUIDS[1]: 96 * MIB}  # only the container's GPU
    (compute,) = plugin.client_for(COMPUTE).allocate([f"{UUIDS[0]}-core-0"])
    assert load_contexts(directory(compute) / "cgpu.conf") == {UUIDS[0]: 96 * MIB}
