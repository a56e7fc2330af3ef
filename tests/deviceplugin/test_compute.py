"""The compute resource, aliyun.com/gpu-core.percentage, over real gRPC, standalone.

A container that asks for memory and compute gets two Allocate calls, in either order; both
must name the same GPU and the same container directory, whose cgpu.conf holds both lines.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from plugin_harness import COMPUTE, UUIDS, assert_exits_cleanly

GIB = 1 << 30
LEDGER = "/var/run/cgpu"


def mem_ids(gpu: int, *units: int) -> list[str]:
    return [f"{UUIDS[gpu]}-{n}" for n in units]


def core_ids(gpu: int, count: int, start: int = 0) -> list[str]:
    return [f"{UUIDS[gpu]}-core-{n}" for n in range(start, start + count)]


def directory(resp: dict) -> Path:
    return Path(next(m["host_path"] for m in resp["mounts"] if m["container_path"] == LEDGER))


def conf_lines(resp: dict) -> list[str]:
    text = (directory(resp) / "cgpu.conf").read_text()
    # `context` lines (the measured context cost): tests/deviceplugin/test_plugin_context_cost.py
    skip = ("#", "context ")
    return [line for line in text.splitlines() if line and not line.startswith(skip)]


def rpc_error(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value


def test_compute_resource_is_advertised_on_its_own_socket(start_plugin) -> None:
    plugin = start_plugin(memory="4GiB")
    regs = {r["resource_name"]: r for r in plugin.kubelet.registrations}
    assert set(regs) == {"aliyun.com/gpu-mem", COMPUTE}
    assert regs[COMPUTE]["endpoint"] == "cgpu-gpu-core.percentage.sock"
    assert regs[COMPUTE]["endpoint"] != regs["aliyun.com/gpu-mem"]["endpoint"]
    assert regs[COMPUTE]["get_preferred_allocation_available"]
    assert regs[COMPUTE]["version"] == "v1beta1"

    devices = plugin.client_for(COMPUTE).devices()
    assert len(devices) == 200  # 100 per GPU
    assert {h for _, h in devices} == {"Healthy"}
    assert sorted(i for i, _ in devices if i.startswith(UUIDS[1])) == sorted(core_ids(1, 100))
    assert len(plugin.client.devices()) == 8  # the memory list is unchanged


def test_compute_alone_gets_a_compute_line_and_the_variable(start_plugin) -> None:
    plugin = start_plugin(memory="4GiB")
    compute = plugin.client_for(COMPUTE)
    (resp,) = compute.allocate(core_ids(1, 30))
    envs = resp["envs"]
    assert envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]
    assert envs["CGPU_COMPUTE_LIMIT"] == "30"
    assert envs["CGPU_LEDGER_DIR"] == LEDGER
    assert "CUDA_MPS_PIPE_DIRECTORY" not in envs
    # No memory asked: the slice is the whole card, so the shim accounts without limiting.
    assert conf_lines(resp) == [
        "version 1",
        f"device {UUIDS[1]} {4 * GIB}",
        f"compute {UUIDS[1]} 30",
    ]
    paths = {m["container_path"] for m in resp["mounts"]}
    assert {"/usr/local/cgpu/libcgpu.so", "/etc/ld.so.preload", LEDGER} <= paths


@pytest.mark.parametrize("compute_first", [False, True], ids=["memory-first", "compute-first"])
def test_memory_and_compute_share_one_directory(start_plugin, compute_first: bool) -> None:
    plugin = start_plugin(memory="16GiB")
    compute = plugin.client_for(COMPUTE)
    if compute_first:
        (c_resp,) = compute.allocate(core_ids(0, 25))
        (m_resp,) = plugin.client.allocate(mem_ids(0, 0, 1, 2, 3))
    else:
        (m_resp,) = plugin.client.allocate(mem_ids(0, 0, 1, 2, 3))
        (c_resp,) = compute.allocate(core_ids(0, 25))

    key = m_resp["annotations"]["cgpu.io/container-key"]
    assert c_resp["annotations"]["cgpu.io/container-key"] == key
    assert directory(m_resp) == directory(c_resp)
    # Every mount the two answers share has the same host path (the kubelet keeps the first).
    m_mounts = {m["container_path"]: m["host_path"] for m in m_resp["mounts"]}
    c_mounts = {m["container_path"]: m["host_path"] for m in c_resp["mounts"]}
    assert m_mounts == c_mounts
    assert m_resp["envs"]["NVIDIA_VISIBLE_DEVICES"] == c_resp["envs"]["NVIDIA_VISIBLE_DEVICES"]
    assert c_resp["envs"]["CGPU_COMPUTE_LIMIT"] == "25"

    slice_bytes = 16 * GIB * 4 // 16
    assert conf_lines(c_resp) == [
        "version 1",
        f"device {UUIDS[0]} {slice_bytes}",
        f"compute {UUIDS[0]} 25",
    ]
    containers = list((plugin.state_dir / "containers").iterdir())
    assert [d.name for d in containers] == [key]


def test_preferred_allocation_follows_the_memory_gpu(start_plugin) -> None:
    plugin = start_plugin(memory="16GiB")
    compute = plugin.client_for(COMPUTE)
    (m_resp,) = plugin.client.allocate(mem_ids(1, 0, 1))
    available = core_ids(0, 100) + core_ids(1, 100)
    chosen = compute.preferred(available, [], 40)
    assert len(chosen) == 40 and all(i.startswith(UUIDS[1]) for i in chosen)
    (c_resp,) = compute.allocate(chosen)
    assert directory(c_resp) == directory(m_resp)


def test_memory_preferred_follows_a_compute_share_made_first(start_plugin) -> None:
    plugin = start_plugin(memory="16GiB")
    compute = plugin.client_for(COMPUTE)
    compute.allocate(core_ids(1, 10))
    chosen = plugin.client.preferred(mem_ids(0, *range(16)) + mem_ids(1, *range(16)), [], 2)
    assert all(i.startswith(UUIDS[1]) for i in chosen)


def test_bad_compute_requests_are_refused(start_plugin) -> None:
    plugin = start_plugin(memory="4GiB")
    compute = plugin.client_for(COMPUTE)

    err = rpc_error(lambda: compute.allocate(core_ids(0, 100) + core_ids(1, 20)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "at most 100" in err.details()

    err = rpc_error(lambda: compute.allocate(core_ids(0, 30) + core_ids(1, 20)))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "span 2 GPUs" in err.details()

    err = rpc_error(lambda: compute.allocate([f"{UUIDS[0]}-0"]))  # a memory ID
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert "unknown aliyun.com/gpu-core.percentage device IDs" in err.details()

    err = rpc_error(lambda: compute.allocate(core_ids(0, 2) + core_ids(0, 1)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "repeated" in err.details()
    # Nothing was left behind by the refusals.
    assert not list((plugin.state_dir / "containers").glob("dp-*"))
    assert plugin.proc.poll() is None


def test_compute_can_be_turned_off(start_plugin) -> None:
    plugin = start_plugin("--compute-resource", "", memory="4GiB")
    assert [r["resource_name"] for r in plugin.kubelet.registrations] == ["aliyun.com/gpu-mem"]
    assert_exits_cleanly(plugin)


def test_both_sockets_come_back_after_a_kubelet_restart(start_plugin) -> None:
    plugin = start_plugin(memory="4GiB")
    before = len(plugin.kubelet.registrations)
    plugin.kubelet.restart()
    plugin.kubelet.wait_registration(before + 2, timeout=5)
    again = {r["resource_name"] for r in plugin.kubelet.registrations[before:]}
    assert again == {"aliyun.com/gpu-mem", COMPUTE}
    assert len(plugin.client_for(COMPUTE).devices()) == 200
    assert_exits_cleanly(plugin)
    assert not (plugin.kubelet.directory / "cgpu-gpu-core.percentage.sock").exists()


def test_a_refused_request_undoes_only_its_own_half(start_plugin) -> None:
    plugin = start_plugin(memory="16GiB")
    compute = plugin.client_for(COMPUTE)
    (m_resp,) = plugin.client.allocate(mem_ids(0, 0, 1))
    before = conf_lines(m_resp)
    # Two containers in one request: the first joins the memory's directory, the second is
    # refused, so the whole request is undone: the compute line goes, the slice stays.
    err = rpc_error(lambda: compute.allocate(core_ids(0, 20), core_ids(0, 10, 20) + core_ids(1, 5)))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert conf_lines(m_resp) == before
    assert [d.name for d in (plugin.state_dir / "containers").iterdir()] == [
        m_resp["annotations"]["cgpu.io/container-key"]
    ]
    # The memory's directory still takes its compute half afterwards.
    (c_resp,) = compute.allocate(core_ids(0, 20))
    assert directory(c_resp) == directory(m_resp)
    assert conf_lines(c_resp)[-1] == f"compute {UUIDS[0]} 20"
