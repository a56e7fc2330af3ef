"""Helpers shared by the device-plugin tests: the running plugin and a few constants."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fake_kubelet import FakeKubelet, PluginClient

REPO = Path(__file__).resolve().parents[2]
UUIDS = [f"GPU-c0ffee00-0000-4000-8000-00000000000{i}" for i in range(8)]
COMPUTE = "aliyun.com/gpu-core.percentage"


def resources_served(args: tuple[str, ...]) -> int:
    """How many resources a plugin started with `args` registers (memory, and compute unless
    it is turned off or in Volcano mode)."""
    flat = " ".join(args)
    if "volcano.sh/gpu-memory" in flat or "--compute-resource=" in args:
        return 1
    if "--compute-resource" in args and args[args.index("--compute-resource") + 1] == "":
        return 1
    return 2


@dataclass
class RunningPlugin:
    """A plugin subprocess registered with a fake kubelet."""

    proc: subprocess.Popen[bytes]
    kubelet: FakeKubelet
    registration: dict[str, Any]
    client: PluginClient
    root: Path
    state_dir: Path
    log_path: Path
    clients: list[PluginClient] = field(default_factory=list)

    def log(self) -> str:
        """What the plugin has logged so far."""
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 10.0) -> str:
        """Wait until the log contains `text`."""
        deadline = time.monotonic() + timeout
        while text not in self.log():
            assert self.proc.poll() is None, f"plugin exited:\n{self.log()}"
            assert time.monotonic() < deadline, f"{text!r} not logged:\n{self.log()}"
            time.sleep(0.05)
        return self.log()

    def reconnect(self) -> PluginClient:
        """A new client on the plugin's socket."""
        client = self.kubelet.plugin(self.registration["endpoint"])
        self.clients.append(client)
        return client

    def client_for(self, resource: str) -> PluginClient:
        """A client on the socket the plugin registered for `resource` (the latest one)."""
        found = [r for r in self.kubelet.registrations if r["resource_name"] == resource]
        assert found, f"{resource} was not registered: {self.kubelet.registrations}"
        client = self.kubelet.plugin(found[-1]["endpoint"])
        self.clients.append(client)
        return client


def gib(n: float) -> int:
    """Bytes in n GiB."""
    return int(n * (1 << 30))


def assert_exits_cleanly(plugin: RunningPlugin) -> None:
    """SIGTERM stops the plugin with status 0 and removes its socket."""
    plugin.proc.send_signal(signal.SIGTERM)
    assert plugin.proc.wait(timeout=10) == 0, plugin.log()
    assert not os.path.exists(plugin.kubelet.directory / plugin.registration["endpoint"])
