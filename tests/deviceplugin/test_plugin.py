"""The plugin on a simulated node, driven by a kubelet-side peer over real gRPC (standalone)."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from plugin_harness import UUIDS, assert_exits_cleanly, gib

from cgpu.core import paths
from cgpu.core.config import load_config
from cgpu.core.containers import containers_root
from cgpu.core.ledger import read_ledger
from cgpu.core.request import parse_env, slice_for

RES = "aliyun.com/gpu-mem"


def ids(gpu: int, *units: int) -> list[str]:
    return [f"{UUIDS[gpu]}-{n}" for n in units]


def test_registration_options_and_prestart(start_plugin) -> None:
    plugin = start_plugin()
    reg = plugin.registration
    assert reg["version"] == "v1beta1"
    assert reg["resource_name"] == RES
    assert reg["endpoint"] == "cgpu-gpu-mem.sock"
    assert reg["get_preferred_allocation_available"] and not reg["pre_start_required"]
    assert plugin.client.options() == {
        "pre_start_required": False,
        "get_preferred_allocation_available": True,
    }
    assert plugin.client.prestart(ids(0, 0)) == b""
    assert_exits_cleanly(plugin)


def test_list_and_watch_advertises_gib_units_per_gpu(start_plugin) -> None:
    # 16130 MiB is a 16 GB V100: 15 units in GiB mode, as gpushare counts them.
    plugin = start_plugin(memory="16130MiB,8GiB")
    devices = plugin.client.devices()
    assert devices == [(i, "Healthy") for i in ids(0, *range(15)) + ids(1, *range(8))]
    assert "advertising 1 GiB units" in plugin.log()


def test_preferred_allocation_on_a_partly_used_node(start_plugin) -> None:
    plugin = start_plugin(devices=3, memory="16GiB")
    # GPU 0: 11 units free; GPU 1: 6 free; GPU 2: all 16 free.
    available = ids(0, *range(5, 16)) + ids(1, *range(10, 16)) + ids(2, *range(16))
    assert plugin.client.preferred(available, [], 4) == ids(1, 10, 11, 12, 13)
    assert plugin.client.preferred(available, [], 8) == ids(0, *range(5, 13))
    assert plugin.client.preferred(available, [], 16) == ids(2, *range(16))
    assert plugin.client.preferred(available, ids(2, 3), 2) == ids(2, 3, 0)


def test_allocate_env_and_mounts_on_disk(start_plugin) -> None:
    plugin = start_plugin(memory="16GiB,16130MiB")
    (resp,) = plugin.client.allocate(ids(1, 0, 1, 2, 3))
    envs = resp["envs"]
    assert envs == {
        "NVIDIA_VISIBLE_DEVICES": UUIDS[1],
        "ALIYUN_COM_GPU_MEM_IDX": "1",
        "ALIYUN_COM_GPU_MEM_CONTAINER": "4",
        "ALIYUN_COM_GPU_MEM_DEV": "15",
        "CGPU_LEDGER_DIR": "/var/run/cgpu",
    }
    mounts = {m["container_path"]: m for m in resp["mounts"]}
    assert set(mounts) == {
        "/usr/local/cgpu/libcgpu.so",
        "/etc/ld.so.preload",
        "/var/run/cgpu",
        "/var/run/cgpu/cgpu.ledger",
    }

    shim = Path(mounts["/usr/local/cgpu/libcgpu.so"]["host_path"])
    assert mounts["/usr/local/cgpu/libcgpu.so"]["read_only"]
    assert shim.is_file() and shim.read_bytes() == paths.shim_path().read_bytes()

    preload = Path(mounts["/etc/ld.so.preload"]["host_path"])
    assert mounts["/etc/ld.so.preload"]["read_only"]
    assert preload.read_text().split() == ["/usr/local/cgpu/libcgpu.so"]

    # The container may charge its ledger but not rewrite its slice or its labels.
    ledger_dir = Path(mounts["/var/run/cgpu"]["host_path"])
    assert mounts["/var/run/cgpu"]["read_only"]
    ledger_mount = mounts["/var/run/cgpu/cgpu.ledger"]
    assert not ledger_mount["read_only"]
    assert Path(ledger_mount["host_path"]) == ledger_dir / "cgpu.ledger"
    assert ledger_dir.parent == containers_root(plugin.state_dir.resolve())
    expected = (16130 << 20) * 4 // 15
    assert expected >> 20 == 4301  # the seed's figure for 4 of 15 units on a V100
    assert load_config(ledger_dir / "cgpu.conf") == {UUIDS[1]: expected}
    # cgpu.conf holds what the shim's own parser makes of the variables the container gets.
    assert slice_for(parse_env(envs), 0, 16130 << 20) == expected
    snap = read_ledger(ledger_dir / "cgpu.ledger")
    assert [(d.uuid, d.limit, d.used) for d in snap.devices] == [(UUIDS[1], expected, 0)]
    assert snap.processes == []
    meta = json.loads((ledger_dir / "meta.json").read_text())
    assert meta["source"] == "device-plugin"
    assert meta["device_ids"] == ids(1, 0, 1, 2, 3)
    assert meta["key"] == ledger_dir.name == resp["annotations"]["cgpu.io/container-key"]


def test_each_container_gets_its_own_directory(start_plugin) -> None:
    plugin = start_plugin(memory="16GiB")
    first, second = plugin.client.allocate(ids(0, 0, 1), ids(1, 0, 1, 2))
    (third,) = plugin.client.allocate(ids(0, 2))
    dirs = [
        Path(next(m["host_path"] for m in r["mounts"] if m["container_path"] == "/var/run/cgpu"))
        for r in (first, second, third)
    ]
    assert len(set(dirs)) == 3
    assert load_config(dirs[0] / "cgpu.conf") == {UUIDS[0]: gib(2)}
    assert load_config(dirs[1] / "cgpu.conf") == {UUIDS[1]: gib(3)}
    assert load_config(dirs[2] / "cgpu.conf") == {UUIDS[0]: gib(1)}
    assert [r["envs"]["ALIYUN_COM_GPU_MEM_CONTAINER"] for r in (first, second, third)] == [
        "2",
        "3",
        "1",
    ]


def _error(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value


def test_unknown_and_cross_gpu_ids_are_refused(start_plugin) -> None:
    plugin = start_plugin(memory="16GiB")
    err = _error(lambda: plugin.client.allocate(["GPU-nope-0", *ids(0, 0)]))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert "unknown aliyun.com/gpu-mem device IDs: GPU-nope-0" in err.details()

    err = _error(lambda: plugin.client.allocate(ids(0, 16)))  # beyond the GPU's 16 units
    assert err.code() == grpc.StatusCode.NOT_FOUND

    err = _error(lambda: plugin.client.allocate(ids(0, 0, 1) + ids(1, 0)))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "span 2 GPUs" in err.details() and "must come from one GPU" in err.details()

    # All or nothing: the first container's directory does not survive the second's refusal.
    err = _error(lambda: plugin.client.allocate(ids(0, 0), ids(0, 1) + ids(1, 1)))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    root = containers_root(plugin.state_dir)
    assert not root.exists() or list(root.iterdir()) == []
