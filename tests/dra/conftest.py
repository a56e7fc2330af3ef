"""Fixtures: the fake API server, and `cgpu dra-driver` running on the simulator against it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dra_helpers import NODE, UUIDS, own_slices, wait_for
from dra_scheduler import Scheduler
from kube.apiserver import FakeApiServer
from kube.fixtures import kube_api  # noqa: F401
from kubelet_peer import KubeletPeer


@pytest.fixture
def dra_root() -> Iterator[Path]:
    """A short directory (unix socket paths are limited to 107 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="cgdra-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@dataclass
class Driver:
    """One running `cgpu dra-driver` and the paths it was given."""

    proc: subprocess.Popen[bytes]
    kubelet_dir: Path
    state_dir: Path
    cdi_dir: Path
    log: Path
    env: dict[str, str]

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM, and its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)


@pytest.fixture
def start_driver(
    sim_env: Callable[..., dict[str, str]],
    dra_root: Path,
    kube_api: FakeApiServer,  # noqa: F811
) -> Iterator[Callable[..., Driver]]:
    """Start `cgpu dra-driver`; keyword args become CGPU_SIM_* (2 GPUs of 16 GiB by default).

    It returns once the driver's registration socket exists and its slice is published.
    """
    running: list[Driver] = []
    kubeconfig = kube_api.kubeconfig(dra_root / "kubeconfig")

    def start(*args: str, node: str = NODE, wait: bool = True, **sim: object) -> Driver:
        sim.setdefault("devices", 2)
        sim.setdefault("uuids", ",".join(UUIDS[: int(str(sim["devices"]))]))
        extra = {"NODE_NAME": node}
        if os.environ.get("CGPU_NATIVE_DIR"):
            extra["CGPU_NATIVE_DIR"] = os.environ["CGPU_NATIVE_DIR"]
        env = sim_env(extra=extra, **sim)
        kubelet_dir, state_dir, cdi_dir = (dra_root / n for n in ("kubelet", "state", "cdi"))
        log = dra_root / f"driver-{len(running)}.log"
        command = [
            sys.executable, "-m", "cgpu.cli", "dra-driver",
            "--kubelet-dir", str(kubelet_dir), "--state-dir", str(state_dir),
            "--cdi-dir", str(cdi_dir), "--kubeconfig", str(kubeconfig), *args,
        ]  # fmt: skip
        with open(log, "wb") as out:
            proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        driver = Driver(proc, kubelet_dir, state_dir, cdi_dir, log, env)
        running.append(driver)
        if wait:
            registry = kubelet_dir / "plugins_registry"
            try:
                wait_for(
                    lambda: any(
                        s["metadata"]["name"] == f"{node}-gpu.cgpu.io"
                        for s in own_slices(kube_api, node)
                    ),
                    "the resourceslice",
                )
                wait_for(
                    lambda: registry.is_dir() and any(p.is_socket() for p in registry.iterdir()),
                    "the registration socket",
                )
            except AssertionError:
                driver.stop()
                raise AssertionError(f"driver did not start:\n{driver.output()}") from None
        return driver

    yield start
    for driver in running:
        driver.stop()


@pytest.fixture
def peer(dra_root: Path) -> Iterator[KubeletPeer]:
    """The kubelet's side, for the driver's kubelet directory."""
    kubelet = KubeletPeer(dra_root / "kubelet")
    yield kubelet
    kubelet.close()


@pytest.fixture
def kube_client(kube_api: FakeApiServer, dra_root: Path) -> Any:  # noqa: F811
    """An official `kubernetes` ApiClient for the fake API server."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(
        config_file=str(kube_api.kubeconfig(dra_root / "kubeconfig-test")),
        client_configuration=configuration,
    )
    api_client = client.ApiClient(configuration)
    yield api_client
    api_client.close()


@pytest.fixture
def scheduler(kube_client: Any) -> Scheduler:
    """The scheduler's part, on the fake API server."""
    return Scheduler(kube_client)
