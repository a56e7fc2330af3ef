"""A container the device plugin already gave a slice is left to the device plugin."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cgpu.core.containers import containers_root
from cgpu.core.layout import KEY_ANNOTATION
from cgpu.hooks.hook import prestart
from cgpu.hooks.oci import State


def test_device_plugin_containers_are_not_injected_twice(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    config = {
        "root": {"path": "rootfs"},
        "process": {"env": ["ALIYUN_COM_GPU_MEM_CONTAINER=4", "ALIYUN_COM_GPU_MEM_DEV=15"]},
        "annotations": {KEY_ANNOTATION: "alloc-1234"},
    }
    (bundle / "config.json").write_text(json.dumps(config))
    state = State(id="c1", status="creating", pid=os.getpid(), bundle=str(bundle))
    assert prestart(state, tmp_path / "state") is None
    assert not containers_root(tmp_path / "state").exists()
    assert sorted(p.name for p in (bundle / "rootfs").iterdir()) == []
