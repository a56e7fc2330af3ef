"""Device-plugin latency and ListAndWatch size on a simulated 8-GPU node.

    python benchmarks/deviceplugin_latency.py [--calls 1000] [--devices 8] [--memory 141GiB]

Starts `cgpu device-plugin` as a subprocess on the simulator (standalone: no API server),
registers it with an in-process kubelet stand-in, and times GetPreferredAllocation and
Allocate as the kubelet sees them: one gRPC round trip over the unix socket each, Allocate
including the container directory it writes. Then it measures the first ListAndWatch
message in GiB and in MiB units. Prints a table, and JSON with --json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from cgpu.core import paths
from cgpu.deviceplugin.api import deviceplugin_v1beta1_pb2 as api
from cgpu.deviceplugin.api import deviceplugin_v1beta1_pb2_grpc as api_grpc
from cgpu.deviceplugin.rm.units import GIB, Unit, list_size


class Kubelet(api_grpc.RegistrationServicer):
    """Just enough of the kubelet: accepts Register and remembers the endpoint."""

    def __init__(self) -> None:
        self.endpoint: str | None = None
        self.registered = threading.Event()

    def Register(self, request: api.RegisterRequest, context: grpc.ServicerContext) -> api.Empty:
        self.endpoint = request.endpoint
        self.registered.set()
        return api.Empty()


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered) * 1e3,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3,
        "mean_ms": statistics.fmean(ordered) * 1e3,
    }


def _start(root: Path, unit: str, devices: int, memory: str) -> tuple[Any, grpc.Channel, Any]:
    kubelet_dir = root / f"kubelet-{unit}"
    kubelet_dir.mkdir()
    kubelet = Kubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_grpc.add_RegistrationServicer_to_server(kubelet, server)
    server.add_insecure_port(f"unix://{kubelet_dir}/kubelet.sock")
    server.start()
    env = dict(os.environ)
    env.update(
        LD_LIBRARY_PATH=os.pathsep.join(
            p for p in (str(paths.sim_lib_dir()), env.get("LD_LIBRARY_PATH", "")) if p
        ),
        CGPU_SIM_DEVICES=str(devices),
        CGPU_SIM_MEMORY=memory,
        CGPU_SIM_STATE=str(root / "sim.state"),
    )
    proc = subprocess.Popen(
        [sys.executable, "-I", "-m", "cgpu.cli", "device-plugin", "--memory-unit", unit,
         "--kubelet-dir", str(kubelet_dir), "--state-dir", str(root / f"state-{unit}"),
         "--pod-resources-socket", str(root / "none.sock"), "--log-level", "WARNING"],
        env=env,
    )  # fmt: skip
    if not kubelet.registered.wait(60):
        proc.kill()
        raise SystemExit("the plugin did not register")
    channel = grpc.insecure_channel(f"unix://{kubelet_dir}/{kubelet.endpoint}")
    grpc.channel_ready_future(channel).result(timeout=10)
    return proc, channel, server


def _stop(proc: Any, channel: grpc.Channel, server: Any) -> None:
    channel.close()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)
    server.stop(0)


def _first_listing(channel: grpc.Channel) -> bytes:
    stream = channel.unary_stream(
        "/v1beta1.DevicePlugin/ListAndWatch",
        request_serializer=lambda m: m,
        response_deserializer=lambda raw: raw,
    )(b"", timeout=60)
    try:
        return next(stream)
    finally:
        stream.cancel()


def measure(calls: int, devices: int, memory: str) -> dict[str, Any]:
    """Run the whole benchmark; returns the figures."""
    root = Path(tempfile.mkdtemp(prefix="cgdp-bench-", dir="/tmp"))
    results: dict[str, Any] = {"calls": calls, "devices": devices, "memory": memory}
    try:
        proc, channel, server = _start(root, "GiB", devices, memory)
        try:
            raw = _first_listing(channel)
            listing = api.ListAndWatchResponse.FromString(raw)
            results["listandwatch_gib"] = {"devices": len(listing.devices), "bytes": len(raw)}
            by_gpu: dict[str, list[str]] = {}
            for device in listing.devices:
                by_gpu.setdefault(device.ID.rsplit("-", 1)[0], []).append(device.ID)
            stub = api_grpc.DevicePluginStub(channel)
            rng = random.Random(1)
            # A partly used node: each GPU has lost a random number of units to other pods.
            available = [i for ids in by_gpu.values() for i in ids[rng.randrange(len(ids)) :]]
            pref = []
            for _ in range(calls):
                request = api.PreferredAllocationRequest(
                    container_requests=[
                        api.ContainerPreferredAllocationRequest(
                            available_deviceIDs=available, allocation_size=rng.randint(1, 16)
                        )
                    ]
                )
                start = time.perf_counter()
                stub.GetPreferredAllocation(request)
                pref.append(time.perf_counter() - start)
            results["get_preferred_allocation"] = _percentiles(pref)
            gpus = list(by_gpu.values())
            alloc = []
            for n in range(calls):
                ids = gpus[n % len(gpus)][: rng.randint(1, 16)]
                request = api.AllocateRequest(
                    container_requests=[api.ContainerAllocateRequest(devices_ids=ids)]
                )
                start = time.perf_counter()
                stub.Allocate(request)
                alloc.append(time.perf_counter() - start)
            results["allocate"] = _percentiles(alloc)
        finally:
            _stop(proc, channel, server)
        proc, channel, server = _start(root, "MiB", devices, memory)
        try:
            raw = _first_listing(channel)
            listing = api.ListAndWatchResponse.FromString(raw)
            gib_per_gpu = int(memory.removesuffix("GiB"))
            uuids = list(dict.fromkeys(d.ID.rsplit("-", 1)[0] for d in listing.devices))
            whole = [(uuid, gib_per_gpu * GIB) for uuid in uuids]
            results["listandwatch_mib"] = {
                "devices": len(listing.devices),
                "bytes": len(raw),
                "unit_mib": gib_per_gpu * 1024 * devices // len(listing.devices),
                "uncoarsened_devices": devices * gib_per_gpu * 1024,
                "uncoarsened_bytes": list_size(whole, Unit("MiB"), "Healthy"),
            }
        finally:
            _stop(proc, channel, server)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results["machine"] = f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs"
    results["python"] = platform.python_version()
    results["grpcio"] = grpc.__version__
    return results


def main() -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--memory", default="141GiB", help="per GPU, in whole GiB")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    r = measure(args.calls, args.devices, args.memory)
    print(f"{args.devices} x {args.memory} simulated GPUs, {args.calls} calls each")
    for name in ("get_preferred_allocation", "allocate"):
        f = r[name]
        print(f"{name:26s} p50 {f['p50_ms']:.3f} ms  p99 {f['p99_ms']:.3f} ms")
    g, m = r["listandwatch_gib"], r["listandwatch_mib"]
    print(f"ListAndWatch GiB units: {g['devices']} devices, {g['bytes']} bytes")
    print(
        f"ListAndWatch MiB units: would be {m['uncoarsened_devices']} devices, "
        f"{m['uncoarsened_bytes']} bytes; coarsened to {m['unit_mib']} MiB units: "
        f"{m['devices']} devices, {m['bytes']} bytes"
    )
    if args.json:
        args.json.write_text(json.dumps(r, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
