"""The whole chain: slice published, claim allocated, prepared over gRPC, and a real podman
container started with the CDI device name prepare returned, held to the claim's memory.

podman reads CDI specs from /var/run/cdi (podman 4.3 reads only /etc/cdi and /var/run/cdi),
so the driver writes there; each spec is named by its claim's UID, and unprepare removes it.
The image holds busybox, the C library, the CUDA probe and the simulator, no cgpu: the shim,
its preload file and the ledger come from the CDI spec. The same chain starts at `cgpu webhook`
for a gpushare pod spec, unchanged: its container gets gpushare's variables and its slice.
"""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from dra_helpers import UUIDS, claim_body
from webhook_chain import claim_pod, gpushare_pod  # puts tests/webhook on the path
from webhook_helpers import client_context, make_cert, patched, review

from cgpu.webhook import kubeapi
from cgpu.webhook.admit import Admitter
from cgpu.webhook.config import WebhookConfig
from cgpu.webhook.metrics import Metrics
from cgpu.webhook.server import CertReloader, WebhookServer
from cgpu.webhook.templates import TemplateStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hooks"))
import test_podman as hooks_podman
from hook_runc import (
    CHUNK,
    SIM_IN_ROOTFS,
    build_rootfs,
    needs_root_and_runc,
    parse_probe,
    probe_script,
)

CDI_DIR = Path("/var/run/cdi")
IMAGE = "localhost/cgpu-dra-probe:test"
GPU_MEMORY = "2GiB"  # per simulated GPU: small, so that filling a slice is quick


@pytest.fixture(scope="module")
def podman(
    tmp_path_factory: pytest.TempPathFactory, native_build: Path, sim_dir: Path, shim: Path
) -> Iterator[hooks_podman.Podman]:
    """podman with the probe image imported; skipped only where podman is not installed."""
    needs_root_and_runc()
    if not shutil.which("podman"):
        pytest.skip("podman is not installed (scripts/setup.sh installs Debian's)")
    base = tmp_path_factory.mktemp("dra-podman")
    rootfs = base / "rootfs"
    build_rootfs(rootfs, native_build / "cuda_probe", sim_dir, shim)
    tar = base / "rootfs.tar"
    subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tar), "."], check=True)
    short = Path(tempfile.mkdtemp(prefix="cgdra-pm-", dir="/tmp"))  # podman: runroot <= 50
    pm = hooks_podman.Podman(short / "podman")
    imported = pm("import", "--quiet", str(tar), IMAGE)
    assert imported.returncode == 0, imported.stderr
    yield pm
    pm("rm", "--all", "--force")
    pm("rmi", "--all", "--force")
    shutil.rmtree(short, ignore_errors=True)


def test_a_claim_runs_in_podman_held_to_its_memory(
    podman, start_driver, peer, kube_api, scheduler
) -> None:
    driver = start_driver("--cdi-dir", str(CDI_DIR), memory=GPU_MEMORY)
    peer.register()
    created = kube_api.create("resourceclaims", claim_body("chain", memory="768Mi"))
    scheduler.allocate("default", "chain", ("chain-pod", "5d1c6a3e-0d7b-4e0f-8b1a-2c9e8f7a6b5d"))
    ref = ("default", created["metadata"]["uid"], "chain")
    answer = peer.prepare(ref)[ref[1]]
    assert answer["error"] == ""
    (cdi_id,) = answer["devices"][0]["cdi_device_ids"]
    gpu = UUIDS[int(answer["devices"][0]["device_name"].removeprefix("gpu-"))]
    # On a real node the container sees only the GPU whose device node the spec gives it;
    # the simulator in the container models that view: the claimed GPU alone.
    sim = {
        "LD_LIBRARY_PATH": SIM_IN_ROOTFS,
        "CGPU_SIM_DEVICES": "1",
        "CGPU_SIM_UUIDS": gpu,
        "CGPU_SIM_MEMORY": GPU_MEMORY,
    }
    envs = [f"--env={k}={v}" for k, v in sim.items()]
    try:
        result = podman(
            "run", "--rm", "--network", "none", *hooks_podman.ULIMITS, *envs,
            f"--device={cdi_id}", IMAGE,
            *probe_script("init", "fill", str(CHUNK), "info"),
        )  # fmt: skip
        env = podman("run", "--rm", *hooks_podman.ULIMITS, f"--device={cdi_id}", IMAGE,
                     "/bin/sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES $CGPU_LEDGER_DIR")  # fmt: skip
    finally:
        unprepared = peer.unprepare(ref)
    assert result.returncode == 0, result.stderr
    out = parse_probe(result.stdout)
    assert out["preload"] == ["/usr/local/cgpu/libcgpu.so"]
    assert "cgpu.conf" in out["ledger-dir"] and "cgpu.ledger" in out["ledger-dir"]
    slice_bytes = 768 << 20
    assert int(out["fill"][0]) * CHUNK == slice_bytes  # allocations stop at the claim's slice
    assert int(out["info"][2]) == slice_bytes  # and the slice is the total it sees
    assert env.stdout.split() == [gpu, "/var/run/cgpu"], env.stderr
    assert unprepared == {ref[1]: ""}
    assert not (CDI_DIR / f"gpu.cgpu.io-claim_{ref[1]}.json").exists()
    assert not (driver.state_dir / "containers" / f"dra-{ref[1]}").exists()


def test_a_gpushare_pod_through_the_webhook_runs_in_podman_as_under_the_device_plugin(
    podman, start_driver, peer, kube_api, scheduler, dra_root
) -> None:
    """webhook (HTTPS, a real AdmissionReview) -> fake API server (template, claim) -> DRA
    prepare -> podman container -> shim: gpushare's variables and a slice of what was asked."""
    driver = start_driver("--cdi-dir", str(CDI_DIR), memory=GPU_MEMORY)
    peer.register()
    certs = dra_root / "certs"
    ca = make_cert(certs)
    api = kubeapi.connect(str(kube_api.kubeconfig(dra_root / "kubeconfig-webhook")))
    config = WebhookConfig(cert_dir=certs)
    admitter = Admitter(config, TemplateStore(api, config.device_class), Metrics())
    server = WebhookServer(admitter, CertReloader(certs), "127.0.0.1", 0)
    server.start()
    pod = gpushare_pod("binpack-1", {"aliyun.com/gpu-mem": "1"})  # 1 GiB of a 2 GiB GPU
    try:
        conn = http.client.HTTPSConnection(
            "localhost", server.port, context=client_context(ca), timeout=10
        )
        conn.request("POST", "/mutate-pods", json.dumps(review(pod)).encode(),
                     {"Content-Type": "application/json"})  # fmt: skip
        answer = json.loads(conn.getresponse().read())
        conn.close()
    finally:
        server.stop()
    assert answer["response"]["allowed"], answer
    rewritten = patched(pod, answer)
    assert "aliyun.com/gpu-mem" not in rewritten["spec"]["containers"][0]["resources"]["limits"]
    ref = claim_pod(kube_api, scheduler, rewritten, "3f2b1c0d-9e8f-4a7b-8c6d-5e4f3a2b1c0d")["main"]
    answer = peer.prepare(ref)[ref[1]]
    assert answer["error"] == ""
    (cdi_id,) = answer["devices"][0]["cdi_device_ids"]
    index = int(answer["devices"][0]["device_name"].removeprefix("gpu-"))
    sim = {"LD_LIBRARY_PATH": SIM_IN_ROOTFS, "CGPU_SIM_DEVICES": "1",
           "CGPU_SIM_UUIDS": UUIDS[index], "CGPU_SIM_MEMORY": GPU_MEMORY}  # fmt: skip
    envs = [f"--env={k}={v}" for k, v in sim.items()]
    shown = "$NVIDIA_VISIBLE_DEVICES $ALIYUN_COM_GPU_MEM_IDX $ALIYUN_COM_GPU_MEM_CONTAINER "
    shown += "$ALIYUN_COM_GPU_MEM_DEV"
    try:
        result = podman(
            "run", "--rm", "--network", "none", *hooks_podman.ULIMITS, *envs,
            f"--device={cdi_id}", IMAGE, *probe_script("init", "fill", str(CHUNK), "info"),
        )  # fmt: skip
        env = podman("run", "--rm", *hooks_podman.ULIMITS, f"--device={cdi_id}", IMAGE,
                     "/bin/sh", "-c", f"echo {shown}")  # fmt: skip
    finally:
        unprepared = peer.unprepare(ref)
    assert result.returncode == 0, result.stderr
    out = parse_probe(result.stdout)
    assert out["preload"] == ["/usr/local/cgpu/libcgpu.so"]
    assert int(out["fill"][0]) * CHUNK == 1 << 30  # allocations stop at the 1 GiB asked for
    assert int(out["info"][2]) == 1 << 30  # and that is the total the program sees
    # What the device plugin gives: the GPU, its index, 1 of the GPU's 2 GiB units.
    assert env.stdout.split() == [UUIDS[index], str(index), "1", "2"], env.stderr
    assert unprepared == {ref[1]: ""}
    assert not (driver.state_dir / "containers" / f"dra-{ref[1]}").exists()
