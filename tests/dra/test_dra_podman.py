"""The whole chain: slice published, claim allocated, prepared over gRPC, and a real podman
container started with the CDI device name prepare returned, held to the claim's memory.

podman reads CDI specs from /var/run/cdi (podman 4.3 reads only /etc/cdi and /var/run/cdi),
so the driver writes there; each spec is named by its claim's UID, and unprepare removes it.
The image holds busybox, the C library, the CUDA probe and the simulator, no cgpu: the shim,
its preload file and the ledger come from the CDI spec.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from dra_helpers import UUIDS, claim_body

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
