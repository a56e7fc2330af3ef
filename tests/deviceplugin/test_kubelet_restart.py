"""A kubelet restart: every socket removed, kubelet.sock recreated; the plugin comes back."""

from __future__ import annotations

import time

from plugin_harness import UUIDS


def test_plugin_reregisters_within_seconds(start_plugin) -> None:
    plugin = start_plugin(memory="4GiB")
    assert len(plugin.client.devices()) == 8
    before = len(plugin.kubelet.registrations)

    started = time.monotonic()
    plugin.kubelet.restart()
    again = plugin.kubelet.wait_registration(before + 1, timeout=5)
    assert time.monotonic() - started < 5
    assert again["endpoint"] == plugin.registration["endpoint"]

    client = plugin.reconnect()
    assert len(client.devices()) == 8
    (resp,) = client.allocate([f"{UUIDS[1]}-0"])
    assert resp["envs"]["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]
    plugin.wait_log("kubelet.sock was recreated")


def test_plugin_waits_for_a_late_kubelet(start_plugin) -> None:
    plugin = start_plugin(memory="4GiB")
    before = len(plugin.kubelet.registrations)
    plugin.kubelet.stop()
    time.sleep(1.5)  # no kubelet at all for a while
    plugin.kubelet.start()
    plugin.kubelet.wait_registration(before + 2, timeout=5)
    assert len(plugin.reconnect().devices()) == 8
