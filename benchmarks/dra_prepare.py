"""DRA driver latency on a simulated 8-GPU node: NodePrepareResources and NodeUnprepareResources.

    python benchmarks/dra_prepare.py [--claims 200] [--devices 8]

Starts `cgpu dra-driver` as a subprocess on the simulator against the tests' fake API server
(tests/kube), registers it as the kubelet does, allocates `--claims` claims of 1 GiB over its
published GPUs, then times one NodePrepareResources per claim (a gRPC round trip over the unix
socket: the claim read from the API server, the container directory, the CDI spec and the
checkpoint written) and one NodeUnprepareResources per claim. Prints a table, and JSON with
--json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from cgpu.core import paths
from cgpu.dra.api import dra_v1_pb2 as dra
from cgpu.dra.api import dra_v1_pb2_grpc as dra_grpc
from cgpu.dra.api import pluginregistration_v1_pb2 as reg
from cgpu.dra.api import pluginregistration_v1_pb2_grpc as reg_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from kube.apiserver import FakeApiServer

NODE = "bench-node"


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered) * 1e3,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3,
    }


def _wait(check: Any, what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def _allocate(api: FakeApiServer, number: int, devices: list[str]) -> tuple[str, str, str]:
    name = f"claim-{number}"
    claim = api.create(
        "resourceclaims",
        {"metadata": {"name": name, "namespace": "default"}, "spec": {"devices": {"requests": []}}},
    )
    result = {
        "request": "gpu",
        "driver": "gpu.cgpu.io",
        "pool": NODE,
        "device": devices[number % len(devices)],
        "consumedCapacity": {"memory": "1Gi", "compute": "0"},
        "shareID": f"share-{number}",
    }

    def allocate(obj: dict[str, Any]) -> dict[str, Any]:
        obj["status"] = {"allocation": {"devices": {"results": [result]}}}
        return obj

    api.update("resourceclaims", name, allocate, "default")
    return ("default", claim["metadata"]["uid"], name)


def run(claims: int, devices: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="cgdra-bench-", dir="/tmp"))
    api = FakeApiServer()
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(paths.sim_lib_dir()),
        "CGPU_SIM_DEVICES": str(devices),
        "CGPU_SIM_MEMORY": "141GiB",
        "NODE_NAME": NODE,
    }
    command = [
        sys.executable, "-m", "cgpu.cli", "dra-driver", "--kubelet-dir", str(root / "kubelet"),
        "--state-dir", str(root / "state"), "--cdi-dir", str(root / "cdi"),
        "--kubeconfig", str(api.kubeconfig(root / "kubeconfig")), "--log-level", "WARNING",
    ]  # fmt: skip
    proc = subprocess.Popen(command, env=env)
    try:
        registry = root / "kubelet" / "plugins_registry"
        sockets = _wait(lambda: registry.is_dir() and list(registry.glob("*.sock")), "registration")
        with grpc.insecure_channel(f"unix://{sockets[0]}") as channel:
            info = reg_grpc.RegistrationStub(channel).GetInfo(reg.InfoRequest(), timeout=10)
        published = _wait(lambda: api.objects("resourceslices"), "the resourceslice")
        names = [d["name"] for d in published[0]["spec"]["devices"]]
        refs = [_allocate(api, n, names) for n in range(claims)]
        stub = dra_grpc.DRAPluginStub(grpc.insecure_channel(f"unix://{info.endpoint}"))
        prepare, unprepare = [], []
        for ns, uid, name in refs:
            request = dra.NodePrepareResourcesRequest(
                claims=[dra.Claim(namespace=ns, uid=uid, name=name)]
            )
            start = time.perf_counter()
            reply = stub.NodePrepareResources(request, timeout=30)
            prepare.append(time.perf_counter() - start)
            assert not reply.claims[uid].error, reply.claims[uid].error
        for ns, uid, name in refs:
            request = dra.NodeUnprepareResourcesRequest(
                claims=[dra.Claim(namespace=ns, uid=uid, name=name)]
            )
            start = time.perf_counter()
            reply = stub.NodeUnprepareResources(request, timeout=30)
            unprepare.append(time.perf_counter() - start)
            assert not reply.claims[uid].error, reply.claims[uid].error
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        api.close()
        shutil.rmtree(root, ignore_errors=True)
    return {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        "claims": claims,
        "devices": devices,
        "prepare": _percentiles(prepare),
        "unprepare": _percentiles(unprepare),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.claims, args.devices)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['machine']}; {args.claims} claims on {args.devices} simulated GPUs")
    print("call                    p50 ms   p99 ms")
    for call in ("prepare", "unprepare"):
        figures = result[call]
        print(f"Node{call.capitalize():<19} {figures['p50_ms']:7.2f}  {figures['p99_ms']:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
