"""A kubelet restart: every socket removed, kubelet.sock recreated; the plugin comes back."""

from __future__ import annotations

import time

import pytest
from plugin_harness import COMPUTE, UUIDS


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


MEMORY = "aliyun.com/gpu-mem"


def _serving_both(plugin, since: int, timeout: float) -> None:  # type: ignore[no-untyped-def]
    """Both resources registered again after registration number `since`, each on a socket
    that answers."""
    deadline = time.monotonic() + timeout
    while True:
        latest = {r["resource_name"]: r for r in plugin.kubelet.registrations[since:]}
        if {MEMORY, COMPUTE} <= latest.keys():
            break
        assert time.monotonic() < deadline, (
            f"not re-registered: {plugin.kubelet.registrations[since:]}\n{plugin.log()}"
        )
        time.sleep(0.05)
    # The plugin may start over once more after the last registration (it saw the restart
    # only then); what counts is that each resource ends up served where it was registered.
    for resource in (MEMORY, COMPUTE):
        while True:
            try:
                client = plugin.client_for(resource)
                assert client.devices()
                break
            except Exception:
                assert time.monotonic() < deadline, f"{resource} not served:\n{plugin.log()}"
                time.sleep(0.1)


@pytest.mark.parametrize(
    ("resource", "when"),
    [(MEMORY, "after"), (MEMORY, "during"), (COMPUTE, "during")],
    ids=["between-the-two", "during-the-first", "during-the-second"],
)
def test_a_kubelet_restart_while_registering(start_plugin, resource: str, when: str) -> None:
    plugin = start_plugin(memory="4GiB")
    before = len(plugin.kubelet.registrations)
    plugin.kubelet.arm_restart(resource, when)
    started = time.monotonic()
    plugin.kubelet.restart()  # the plugin registers again; the kubelet restarts once more then
    _serving_both(plugin, before, timeout=8)
    assert time.monotonic() - started < 8
    assert not plugin.kubelet.armed, "the armed restart never happened"
    # Settled: the last registration of each resource names a socket that is there.
    for resource_name in (MEMORY, COMPUTE):
        last = [r for r in plugin.kubelet.registrations if r["resource_name"] == resource_name][-1]
        assert (plugin.kubelet.directory / last["endpoint"]).is_socket()
