"""The chain tests' node: `cgpu device-plugin` in API mode on a simulated 2-GPU node-1,
registered with a kubelet peer, reading the same fake API server as the extender."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kube.apiserver import FakeApiServer
from kube.processes import stop

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "deviceplugin"))
from fake_kubelet import FakeKubelet

# Two V100-sized GPUs (16130 MiB: 15 GiB units each).
NODE_UUIDS = [f"GPU-c0ffee00-0000-4000-8000-00000000000{i}" for i in range(2)]


@dataclass
class NodePlugin:
    """The running plugin's kubelet peer, and the plugin's log."""

    kubelet: FakeKubelet
    log_path: Path


@contextmanager
def run_node_plugin(
    kube_api: FakeApiServer, sim_env: Callable[..., dict[str, str]]
) -> Iterator[NodePlugin]:
    """Start the plugin and its kubelet peer; stop both (and remove their files) on exit."""
    root = Path(tempfile.mkdtemp(prefix="cgsc-", dir="/tmp"))  # unix socket paths are short
    kubelet_dir = root / "device-plugins"
    kubelet_dir.mkdir()
    kubelet = FakeKubelet(kubelet_dir)
    kubelet.start()
    env = sim_env(devices=2, uuids=",".join(NODE_UUIDS), memory="16130MiB")
    command = [
        sys.executable, "-m", "cgpu.cli", "device-plugin",
        "--kubelet-dir", str(kubelet_dir), "--state-dir", str(root / "state"),
        "--pod-resources-socket", str(root / "pod-resources.sock"),
        "--kubeconfig", str(kube_api.kubeconfig(root / "kubeconfig")),
        "--node-name", "node-1",
    ]  # fmt: skip
    log_path = root / "plugin.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield NodePlugin(kubelet, log_path)
    finally:
        stop(proc, timeout=10)
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)
