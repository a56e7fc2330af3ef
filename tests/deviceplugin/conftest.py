"""Fixtures: a fake kubelet, and the plugin running as a subprocess on the simulator."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_kubelet import FakeKubelet
from kube.fixtures import recorded_api  # noqa: F401
from plugin_harness import UUIDS, RunningPlugin, resources_served


@pytest.fixture
def dp_root() -> Iterator[Path]:
    """A short directory (unix socket paths are limited to 107 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="cgdp-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def start_plugin(
    sim_env: Callable[..., dict[str, str]], dp_root: Path
) -> Iterator[Callable[..., RunningPlugin]]:
    """Start `cgpu device-plugin` against a fake kubelet; keyword args become CGPU_SIM_*."""
    running: list[RunningPlugin] = []

    def start(
        *args: str,
        extra_env: dict[str, str] | None = None,
        registrations: int | None = None,
        **sim: object,
    ) -> RunningPlugin:
        sim.setdefault("devices", 2)
        sim.setdefault("uuids", ",".join(UUIDS[: int(str(sim["devices"]))]))
        kubelet_dir = dp_root / "device-plugins"
        kubelet_dir.mkdir(exist_ok=True)
        state_dir = dp_root / "state"
        kubelet = FakeKubelet(kubelet_dir)
        kubelet.start()
        extra = dict(extra_env or {})
        if os.environ.get("CGPU_NATIVE_DIR"):  # a development build, not a simulator setting
            extra.setdefault("CGPU_NATIVE_DIR", os.environ["CGPU_NATIVE_DIR"])
        env = sim_env(extra=extra, **sim)
        log_path = dp_root / f"plugin-{len(running)}.log"
        command = [
            sys.executable, "-m", "cgpu.cli", "device-plugin",
            "--kubelet-dir", str(kubelet_dir),
            "--state-dir", str(state_dir),
            "--pod-resources-socket", str(dp_root / "pod-resources.sock"),
            *args,
        ]  # fmt: skip
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        expected = registrations if registrations is not None else resources_served(args)
        try:
            registration = kubelet.wait_registration(1, 20)
            kubelet.wait_registration(expected, 20)
        except AssertionError:
            proc.kill()
            kubelet.stop()
            raise AssertionError(f"plugin did not register:\n{log_path.read_text()}") from None
        client = kubelet.plugin(registration["endpoint"])
        plugin = RunningPlugin(proc, kubelet, registration, client, dp_root, state_dir, log_path)
        running.append(plugin)
        return plugin

    yield start
    for plugin in running:
        if plugin.proc.poll() is None:
            plugin.proc.send_signal(signal.SIGTERM)
            try:
                plugin.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                plugin.proc.kill()
                plugin.proc.wait()
        for client in [plugin.client, *plugin.clients]:
            client.close()
        plugin.kubelet.stop()
