"""The soak's node: the host daemons as processes through `cgpu`, their peers, the workload.

One simulated node (2 GPUs of 16 GiB), one shared state dir: the device plugin owns GPU 0, the DRA
driver GPU 1 (cgpu.core.ownership; a node mid-migration). `cgpu device-plugin` registers with
the tests' fake kubelet (tests/deviceplugin/fake_kubelet.py) and judges clean-up from the tests'
fake pod-resources; `cgpu dra-driver` reads claims from the tests' fake API server (tests/kube)
and is called by the tests' kubelet peer (tests/dra/kubelet_peer.py); `cgpu exporter` serves
/metrics on a loopback port. Only `cgpu.core` and the tests' harness modules are imported, so
moves inside the parts do not break the soak.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
for _sub in ("tests", "tests/deviceplugin", "tests/dra"):
    sys.path.insert(0, str(REPO / _sub))

from fake_kubelet import FakeKubelet, PluginClient  # noqa: E402
from kube.apiserver import FakeApiServer  # noqa: E402
from kubelet_peer import KubeletPeer  # noqa: E402

from cgpu.core.paths import shim_path, sim_lib_dir  # noqa: E402

NODE = "soak-node"
GPUS = 2
GPU_GIB = 16
CTX_MIB = 64  # what the simulator's first context on a device takes
UUIDS = [f"GPU-50a40000-0000-4000-8000-{i:012d}" for i in range(GPUS)]
DP_RESOURCE = "aliyun.com/gpu-mem"
CLEANUP_INTERVAL_S = 0.2
# The device plugin's clean-up grace (600 s by default). Not 0: a pass reads pod-resources, then
# lists the directories, so a directory made in between (its pod listed just after the read)
# would look abandoned; the grace is what covers the gap between Allocate and the kubelet
# listing the container, and a pass takes milliseconds.
CLEANUP_GRACE_S = 2.0


def wait_for(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """Poll `check` until it returns something true; RuntimeError after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def sim_env(root: Path) -> dict[str, str]:
    """The environment every process of the node runs in: the simulator, no limit variables."""
    limits = ("CGPU_", "ALIYUN_", "VOLCANO_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(limits)}
    env.pop("KUBECONFIG", None)
    if os.environ.get("CGPU_NATIVE_DIR"):  # a development build, not a simulator setting
        env["CGPU_NATIVE_DIR"] = os.environ["CGPU_NATIVE_DIR"]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(sim_lib_dir()), os.environ.get("LD_LIBRARY_PATH", "")) if p
    )
    env.update(
        CGPU_SIM_DEVICES=str(GPUS),
        CGPU_SIM_UUIDS=",".join(UUIDS),
        CGPU_SIM_MEMORY=f"{GPU_GIB}GiB",
        CGPU_SIM_CTX_OVERHEAD=f"{CTX_MIB}MiB",
        CGPU_SIM_STATE=str(root / "sim.state"),
        NODE_NAME=NODE,
        PYTHONSAFEPATH="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def cgpu_command(*args: str) -> list[str]:
    """`cgpu ARGS` through this Python's installed package (never the checkout's folders)."""
    return [sys.executable, "-P", "-m", "cgpu.cli", *args]


def cuda_include() -> Path:
    """The directory holding cuda.h."""
    bases = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    bases += sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    for base in bases:
        if base and Path(base, "include", "cuda.h").is_file():
            return Path(base, "include")
    raise SystemExit("cuda.h not found (set CUDA_HOME)")


def build_workload(out: Path) -> Path:
    """tests/exporter/workload.c (allocate N MiB, print ready, hold until stdin closes)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("a C compiler is needed to build the workload")
    source = REPO / "tests" / "exporter" / "workload.c"
    subprocess.run(
        [compiler, "-O1", "-Wall", "-Werror", "-I", str(cuda_include()), str(source), "-o",
         str(out), "-L", str(sim_lib_dir()), "-l:libcuda.so.1"],
        check=True,
    )  # fmt: skip
    return out


@dataclass
class Daemon:
    """One host daemon process and its log."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        """Whether it is still running."""
        return self.proc.poll() is None

    def stop(self) -> int:
        """SIGTERM, then SIGKILL after 15 s; its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)


@dataclass
class PodResources:
    """The pod-resources API in its own process (benchmarks/soak_podresources.py), serving
    what `pods_file` holds."""

    socket: Path
    pods_file: Path
    proc: subprocess.Popen[bytes]

    @classmethod
    def start(cls, root: Path, env: dict[str, str]) -> PodResources:
        """Start it; returns once it serves."""
        socket, pods_file = root / "pod-resources.sock", root / "pods.json"
        server = Path(__file__).resolve().parent / "soak_podresources.py"
        proc = subprocess.Popen(
            [sys.executable, "-P", str(server), str(socket), str(pods_file)],
            env=env, cwd=root, stdout=subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != b"serving":
            proc.kill()
            raise RuntimeError("the pod-resources server did not start")
        return cls(socket, pods_file, proc)

    def set_pods(self, pods: list[tuple[str, str, list[tuple[str, str, list[str]]]]]) -> None:
        """What List answers from now on."""
        tmp = self.pods_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(pods))
        os.replace(tmp, self.pods_file)

    def stop(self) -> None:
        """SIGTERM, and wait."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=15)


@dataclass
class Node:
    """Everything the lifecycles talk to."""

    root: Path
    env: dict[str, str]
    state_dir: Path
    cdi_dir: Path
    workload: Path
    api: FakeApiServer
    kubelet: FakeKubelet
    pod_resources: PodResources
    plugin: PluginClient
    peer: KubeletPeer
    dra_devices: list[str]
    dp_devices: list[str]
    exporter_url: str
    daemons: list[Daemon] = field(default_factory=list)

    def close(self) -> list[tuple[str, int]]:
        """Stop everything; each daemon's exit status."""
        statuses = [(d.name, d.stop()) for d in self.daemons]
        self.plugin.close()
        self.peer.close()
        self.kubelet.stop()
        self.pod_resources.stop()
        self.api.close()
        return statuses


def _spawn(name: str, args: list[str], env: dict[str, str], root: Path) -> Daemon:
    log = root / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cgpu_command(*args), env=env, cwd=root, stdout=out, stderr=subprocess.STDOUT
        )
    return Daemon(name, proc, log)


def _serving_url(daemon: Daemon) -> str:
    def found() -> str | None:
        if not daemon.alive():
            raise RuntimeError(f"the exporter exited:\n{daemon.log.read_text()}")
        for line in daemon.log.read_text(errors="replace").splitlines():
            if "serving http://" in line:
                return "http://" + line.split("http://")[1].strip()
        return None

    return str(wait_for(found, "the exporter to listen"))


def start_node(root: Path) -> Node:
    """Build the workload, start the peers and the three daemons; returns once all serve."""
    env = sim_env(root)
    workload = build_workload(root / "workload")
    if not shim_path().is_file():
        raise SystemExit(f"the shim is not installed at {shim_path()}")
    api = FakeApiServer(history=1000)
    kubelet = FakeKubelet(root / "device-plugins")
    kubelet.directory.mkdir()
    kubelet.start()
    pod_resources = PodResources.start(root, env)
    daemons: list[Daemon] = []
    try:
        return _start_daemons(root, env, workload, api, kubelet, pod_resources, daemons)
    except BaseException:
        for daemon in daemons:
            daemon.stop()
        kubelet.stop()
        pod_resources.stop()
        api.close()
        raise


def _start_daemons(
    root: Path,
    env: dict[str, str],
    workload: Path,
    api: FakeApiServer,
    kubelet: FakeKubelet,
    pod_resources: PodResources,
    daemons: list[Daemon],
) -> Node:
    state_dir, cdi_dir = root / "state", root / "cdi"
    # One state dir, so each daemon owns one of the two GPUs (cgpu.core.ownership): the node is
    # split as during a migration from the device plugin to DRA.
    daemons.append(_spawn("device-plugin", [
        "device-plugin", "--kubelet-dir", str(kubelet.directory), "--state-dir",
        str(state_dir), "--pod-resources-socket", str(pod_resources.socket),
        "--cleanup-interval", str(CLEANUP_INTERVAL_S), "--cleanup-grace", str(CLEANUP_GRACE_S),
        "--gpus", "0", "--log-level", "WARNING",
    ], env, root))  # fmt: skip
    daemons.append(_spawn("dra-driver", [
        "dra-driver", "--kubelet-dir", str(root / "kubelet"), "--state-dir", str(state_dir),
        "--cdi-dir", str(cdi_dir), "--kubeconfig", str(api.kubeconfig(root / "kubeconfig")),
        "--gpus", "1", "--log-level", "WARNING",
    ], env, root))  # fmt: skip
    registration = kubelet.wait_registration(1, 60)
    plugin = kubelet.plugin(registration["endpoint"])
    dp_devices = [device for device, _ in plugin.devices()]
    slices = wait_for(lambda: api.objects("resourceslices"), "the DRA driver's resourceslice")
    dra_devices = [d["name"] for d in slices[0]["spec"]["devices"]]
    peer = KubeletPeer(root / "kubelet")
    peer.register(timeout=60)
    daemons.append(_spawn("exporter", [
        "exporter", "--address", "127.0.0.1", "--port", "0", "--state-dir", str(state_dir),
        "--pod-resources-socket", str(pod_resources.socket), "--nvml-retry", "1",
        "--log-level", "WARNING",
    ], env, root))  # fmt: skip
    url = _serving_url(daemons[-1])
    return Node(
        root, env, state_dir, cdi_dir, workload, api, kubelet, pod_resources, plugin, peer,
        dra_devices, dp_devices, url, daemons,
    )  # fmt: skip
