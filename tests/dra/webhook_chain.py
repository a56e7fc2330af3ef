"""The two paths a gpushare/Volcano pod can take, side by side on one simulated node.

- The device plugin's: `cgpu device-plugin` on a fake kubelet, Allocate over gRPC.
- The webhook's: `cgpu webhook` admits the pod (its Admitter, templates written to the fake
  API server), the resourceclaim controller's part makes each claim from its template, the
  scheduler's stand-in allocates it, and the running `cgpu dra-driver` prepares it.

Both report what a container gets: its variables, its slice (the container directory's
cgpu.conf, through the shim's parser), and nvidia-smi's view under the shim.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
for _where in ("deviceplugin", "webhook"):
    if str(TESTS / _where) not in sys.path:
        sys.path.insert(0, str(TESTS / _where))

from fake_kubelet import FakeKubelet  # noqa: E402
from webhook_helpers import patched, review  # noqa: E402

from cgpu.core.config import load_config  # noqa: E402
from cgpu.webhook import kubeapi  # noqa: E402
from cgpu.webhook.admit import Admitter  # noqa: E402
from cgpu.webhook.config import WebhookConfig  # noqa: E402
from cgpu.webhook.metrics import Metrics  # noqa: E402
from cgpu.webhook.templates import TemplateStore  # noqa: E402

Obj = dict[str, Any]
MiB = 1 << 20
LEDGER_IN_CONTAINER = "/var/run/cgpu"
REQUIREMENTS = TESTS / "realstack" / "requirements.txt"
SMI_RELEASE = {"driver_release": "535.261.03", "driver_version": "12020"}  # the pinned smi's


@dataclass(frozen=True)
class Served:
    """What one container was given on either path."""

    env: dict[str, str]
    directory: Path  # the container directory on the host (mounted at /var/run/cgpu)

    @property
    def slices(self) -> dict[str, int]:
        """{uuid: bytes}, as the shim reads cgpu.conf."""
        return load_config(self.directory / "cgpu.conf")


def gpushare_pod(name: str, limits: dict[str, str], labels: dict[str, str] | None = None) -> Obj:
    """A one-container pod as users write them for gpushare or Volcano."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {
            "containers": [
                {"name": "main", "image": "nvidia/cuda:12.4.1-base-ubuntu22.04",
                 "resources": {"limits": limits}}
            ]
        },
    }  # fmt: skip


def admit(kube_api: Any, pod: Obj, workdir: Path, unit_mib: int = 1024) -> Obj:
    """`pod` as `cgpu webhook` rewrites it (its templates written to the fake API server)."""
    api = kubeapi.connect(str(kube_api.kubeconfig(workdir / "kubeconfig-webhook")))
    config = WebhookConfig(cert_dir=workdir, unit_mib=unit_mib)
    admitter = Admitter(config, TemplateStore(api, config.device_class), Metrics())
    status, answer = admitter.handle(json.dumps(review(pod)).encode())
    assert status == 200 and isinstance(answer, dict), answer
    assert answer["response"]["allowed"], answer["response"]
    return patched(pod, answer)


def claim_pod(kube_api: Any, scheduler: Any, pod: Obj, uid: str) -> dict[str, tuple[str, str, str]]:
    """Make each of the rewritten pod's claims from its template (the resourceclaim
    controller's part), allocate and reserve it for the pod (the scheduler's): the kubelet's
    (namespace, uid, name) of each container's claim, by container name."""
    namespace, pod_name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    refs: dict[str, tuple[str, str, str]] = {}
    made: dict[str, tuple[str, str, str]] = {}
    for entry in pod["spec"]["resourceClaims"]:
        template = kube_api.get(
            "resourceclaimtemplates", entry["resourceClaimTemplateName"], namespace
        )
        name = f"{pod_name}-{entry['name']}"
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod_name,
                        "uid": uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": template["spec"]["spec"],
        }
        created = kube_api.create("resourceclaims", body)
        scheduler.allocate(namespace, name, (pod_name, uid))
        made[entry["name"]] = (namespace, created["metadata"]["uid"], name)
    for container in pod["spec"]["containers"]:
        for claim in (container.get("resources") or {}).get("claims") or []:
            refs[container["name"]] = made[claim["name"]]
    return refs


def prepared(driver: Any, peer: Any, ref: tuple[str, str, str]) -> tuple[Served, Obj]:
    """Prepare `ref` through the kubelet's peer: what the container gets, and the answer."""
    answer = peer.prepare(ref)[ref[1]]
    assert answer["error"] == "", answer["error"]
    spec = json.loads((driver.cdi_dir / f"gpu.cgpu.io-claim_{ref[1]}.json").read_text())
    edits = spec["devices"][0]["containerEdits"]
    env = dict(e.split("=", 1) for e in edits["env"])
    (ledger,) = [m for m in edits["mounts"] if m["containerPath"] == LEDGER_IN_CONTAINER]
    return Served(env, Path(ledger["hostPath"])), answer


@contextmanager
def device_plugin(root: Path, env: dict[str, str], *args: str, resources: int = 2) -> Iterator[Any]:
    """`cgpu device-plugin` registered with a fake kubelet; yields its memory resource's client."""
    kubelet_dir = root / "device-plugins"
    kubelet_dir.mkdir(parents=True, exist_ok=True)
    kubelet = FakeKubelet(kubelet_dir)
    kubelet.start()
    log = root / "device-plugin.log"
    command = [
        sys.executable, "-m", "cgpu.cli", "device-plugin", "--kubelet-dir", str(kubelet_dir),
        "--state-dir", str(root / "dp-state"),
        "--pod-resources-socket", str(root / "pod-resources.sock"), *args,
    ]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        try:
            first = kubelet.wait_registration(1, 20)
            kubelet.wait_registration(resources, 20)
        except AssertionError:
            raise AssertionError(f"device plugin did not register:\n{log.read_text()}") from None
        client = kubelet.plugin(first["endpoint"])
        yield client
        client.close()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        kubelet.stop()


def allocated(client: Any, ids: list[str]) -> Served:
    """Allocate one container on the device plugin: what it gets."""
    (response,) = client.allocate(ids)
    (ledger,) = [m for m in response["mounts"] if m["container_path"] == LEDGER_IN_CONTAINER]
    return Served(dict(response["envs"]), Path(ledger["host_path"]))


def smi_path() -> Path:
    """NVIDIA's nvidia-smi, pinned in tests/realstack/requirements.txt (setup.sh unpacks it)."""
    found = re.search(r"^deb:\s*nvidia-smi=(\S+)", REQUIREMENTS.read_text(), re.M)
    assert found, f"no 'deb: nvidia-smi=<version>' line in {REQUIREMENTS}"
    return TESTS.parent / "build" / "nvidia-smi" / found[1] / "nvidia-smi"


def smi_view(smi: Path, env: dict[str, str], shim: Path, served: Served, uuid: str) -> list[int]:
    """nvidia-smi's [total, used] MiB of GPU `uuid`, run under the shim with the container's
    directory as its ledger directory (where, in the container, /var/run/cgpu is)."""
    run_env = {**env, "LD_PRELOAD": str(shim), "CGPU_LEDGER_DIR": str(served.directory)}
    done = subprocess.run(
        [str(smi), "-i", uuid, "--query-gpu=memory.total,memory.used",
         "--format=csv,noheader,nounits"],
        env=run_env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return [int(v) for v in done.stdout.strip().split(",")]
