"""The 4 MiB ListAndWatch ceiling: 8 x 141 GiB in MiB units is coarsened, not broken."""

from __future__ import annotations

from plugin_harness import UUIDS

H200 = "141GiB"


def test_mib_units_on_eight_h200_are_coarsened(start_plugin) -> None:
    plugin = start_plugin("--memory-unit", "MiB", devices=8, memory=H200)
    # The peer reads with gRPC's default 4 MiB limit, as the kubelet does.
    devices = plugin.client.devices()
    per_gpu = (141 * 1024) // 32
    assert len(devices) == 8 * per_gpu
    assert devices[0] == (f"{UUIDS[0]}-0", "Healthy")
    assert devices[-1] == (f"{UUIDS[7]}-{per_gpu - 1}", "Healthy")
    log = plugin.log()
    assert "above the kubelet's 4194304-byte ListAndWatch limit" in log
    assert "advertising 32 MiB units" in log

    (resp,) = plugin.client.allocate([f"{UUIDS[3]}-{n}" for n in range(32)])
    assert resp["envs"]["ALIYUN_COM_GPU_MEM_CONTAINER"] == "32"
    assert resp["envs"]["ALIYUN_COM_GPU_MEM_DEV"] == str(per_gpu)


def test_gib_units_on_eight_h200_fit(start_plugin) -> None:
    plugin = start_plugin(devices=8, memory=H200)
    assert len(plugin.client.devices()) == 8 * 141
    assert "coarse" not in plugin.log() and "instead" not in plugin.log()
