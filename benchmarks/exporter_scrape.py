"""How long one `cgpu exporter` scrape takes: N containers with live processes on G GPUs.

Builds a temporary state dir with synthetic containers written through the binding
(`cgpu.core.containers.create_container_dir`, which calls `cgpu.core.ledger.init_ledger`),
charges each ledger from live child processes exactly as the shim does
(`cgpu_ledger_test_charge`), points NVML at the simulator with G GPUs, and times full scrapes:
collect plus rendering the text exposition, which is what an HTTP scrape costs minus the socket.

With the host view (the default), each live process also allocates its memory through the
simulator's libcuda, sharing one CGPU_SIM_STATE with the exporter, so NVML lists every process
and each scrape attributes all of them to their containers (`cgpu.core.hostview`). The
processes run in the host's namespaces, so they are placed by their ledger slots after the
host rules found nothing: every rule is tried for every process.

    python benchmarks/exporter_scrape.py [--containers 200] [--gpus 8] [--procs 1] [--scrapes 50]
                                         [--churn 0] [--no-host-view]

It exits non-zero when the median scrape is over the 50 ms target.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GIB = 1 << 30
MIB = 1 << 20


def uuid_of(index: int) -> str:
    """The simulator UUID of GPU `index` (set through CGPU_SIM_UUIDS below)."""
    return f"GPU-be4c0000-0000-4000-8000-{index:012d}"


def make_containers(state_dir: Path, containers: int, gpus: int) -> list[Path]:
    """Containers spread over the GPUs; every eighth one has slices on two GPUs."""
    from cgpu.core.containers import create_container_dir

    dirs = []
    for i in range(containers):
        limits = {uuid_of(i % gpus): 2 * GIB}
        if i % 8 == 7:
            limits[uuid_of((i + 1) % gpus)] = GIB
        meta = {
            "source": "device-plugin",
            "namespace": f"team-{i % 10}",
            "pod": f"job-{i}-0",
            "container": "main",
            "device_ids": [f"{uuid_of(i % gpus)}-_-{i}"],
        }
        dirs.append(create_container_dir(state_dir, f"alloc-{i:05d}", limits, meta))
    return dirs


def allocate_on_gpu(index: int, size: int) -> int:
    """In a fresh child: allocate `size` bytes on simulated GPU `index` through libcuda."""
    import ctypes

    from cgpu.core.paths import sim_lib_dir

    cuda = ctypes.CDLL(str(sim_lib_dir() / "libcuda.so.1"))
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    for call in (
        lambda: cuda.cuInit(0),
        lambda: cuda.cuDeviceGet(ctypes.byref(dev), index),
        lambda: cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev),
        lambda: cuda.cuCtxSetCurrent(ctx),
        lambda: cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)),
    ):
        rc = call()
        if rc != 0:
            return int(rc)
    return 0


def spawn_holders(
    dirs: list[Path], procs: int, gpus: int, on_gpu: bool
) -> list[tuple[int, int]]:
    """Fork `procs` live processes per container, each charging its ledger (and, `on_gpu`,
    allocating the same through the simulator); (pid, release fd)."""
    from cgpu.core.layout import LEDGER_NAME
    from cgpu.core.native import load

    _, lib = load()
    holders = []
    for n, directory in enumerate(dirs):
        ledger = str(directory / LEDGER_NAME).encode()
        for p in range(procs):
            ready_r, ready_w = os.pipe()
            release_r, release_w = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    size = (64 + n % 64 + p) * MIB
                    rc = lib.cgpu_ledger_test_charge(ledger, 0, size, 1)
                    if rc == 0 and on_gpu:
                        rc = allocate_on_gpu(n % gpus, size)
                    os.write(ready_w, b"0" if rc == 0 else b"1")
                    os.read(release_r, 1)
                finally:
                    os._exit(0)
            os.close(ready_w)
            os.close(release_r)
            if os.read(ready_r, 1) != b"0":
                sys.exit(f"charging {ledger.decode()} failed")
            os.close(ready_r)
            holders.append((pid, release_w))
    return holders


def churn(dirs: list[Path], count: int) -> None:
    """History: `count` processes per container that charge their ledger and exit at once."""
    from cgpu.core.layout import LEDGER_NAME
    from cgpu.core.native import load

    _, lib = load()
    for directory in dirs:
        ledger = str(directory / LEDGER_NAME).encode()
        for _ in range(count):
            pid = os.fork()
            if pid == 0:
                os._exit(lib.cgpu_ledger_test_charge(ledger, 0, 32 * MIB, 1) & 0x7F)
            os.waitpid(pid, 0)


def release(holders: list[tuple[int, int]]) -> None:
    """Let every holder exit, and reap it."""
    for pid, fd in holders:
        os.write(fd, b"x")
        os.close(fd)
        os.waitpid(pid, 0)


def time_scrapes(
    state_dir: Path, scrapes: int, host_view: bool
) -> tuple[list[float], list[float], list[float], int, str]:
    """(full scrape seconds, collect-only seconds, full scrape CPU seconds of this process,
    bytes of exposition text, exposition).

    A full scrape is what the exporter's HTTP server does before gzip: collect, then write the
    text format with `cgpu.exporter.exposition.render`. Its bytes are checked against
    `prometheus_client.generate_latest` once, before timing.
    """
    from prometheus_client import CollectorRegistry, generate_latest

    from cgpu.core.hostview import Attributor
    from cgpu.exporter.collector import CgpuCollector
    from cgpu.exporter.exposition import render
    from cgpu.exporter.nvml import NvmlSource

    attributor = Attributor() if host_view else None
    collector = CgpuCollector(state_dir, gpus=NvmlSource(), attributor=attributor)
    registry = CollectorRegistry()
    registry.register(collector)
    metrics = list(registry.collect())  # warm-up: NVML init, meta.json cache

    class Fixed:
        def collect(self) -> list[Any]:
            return metrics

    text = render(metrics).decode()
    if text != generate_latest(Fixed()).decode():
        sys.exit("the exporter's exposition differs from prometheus_client's")
    full, collect, cpu = [], [], []
    for _ in range(scrapes):
        start, start_cpu = time.perf_counter(), time.process_time()
        render(registry.collect())
        full.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        start = time.perf_counter()
        list(collector.collect())
        collect.append(time.perf_counter() - start)
    return full, collect, cpu, len(text), text


def host_view_summary(text: str) -> dict[str, float]:
    """What the host view saw: bytes attributed to containers, and unattributed bytes."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    return {
        "host_used_mib": sums.get("cgpu_container_gpu_memory_host_used_bytes", 0) / MIB,
        "shim_used_mib": sums.get("cgpu_container_gpu_memory_used_bytes", 0) / MIB,
        "unattributed_mib": sums.get("cgpu_gpu_memory_unattributed_bytes", 0) / MIB,
    }


def summary(samples: list[float]) -> dict[str, float]:
    """Median, p95 and max in milliseconds."""
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "median_ms": round(statistics.median(ordered) * 1e3, 2),
        "p95_ms": round(p95 * 1e3, 2),
        "max_ms": round(ordered[-1] * 1e3, 2),
    }


def main() -> int:
    """Run the benchmark and print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=200)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--procs", type=int, default=1, help="live processes per container")
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument(
        "--churn", type=int, default=0, help="processes per container that came and went before"
    )
    parser.add_argument(
        "--no-host-view",
        dest="host_view",
        action="store_false",
        help="no NVML processes and no attribution (the ledgers only)",
    )
    args = parser.parse_args()

    os.environ["CGPU_SIM_DEVICES"] = str(args.gpus)
    os.environ["CGPU_SIM_UUIDS"] = ",".join(uuid_of(i) for i in range(args.gpus))
    os.environ["CGPU_SIM_MEMORY"] = "80GiB"
    with tempfile.TemporaryDirectory(prefix="cgpu-bench-") as tmp:
        os.environ["CGPU_SIM_STATE"] = str(Path(tmp) / "sim.state")
        state_dir = Path(tmp) / "state"
        dirs = make_containers(state_dir, args.containers, args.gpus)
        churn(dirs, args.churn)
        # Before NVML: fork from a single-threaded process.
        holders = spawn_holders(dirs, args.procs, args.gpus, args.host_view)
        try:
            from cgpu.core.gpus import use_simulator

            use_simulator()
            full, collect, cpu, size, text = time_scrapes(
                state_dir, args.scrapes, args.host_view
            )
        finally:
            release(holders)
    result = {
        "containers": args.containers,
        "gpus": args.gpus,
        "live_processes": len(holders),
        "exited_processes": args.churn * args.containers,
        "scrapes": args.scrapes,
        "host_view": args.host_view,
        "exposition_bytes": size,
        "scrape": summary(full),
        "collect_only": summary(collect),
        # CPU time of the scraping process: what the scrape costs, less what other programs on
        # a busy machine take from it.
        "scrape_cpu": summary(cpu),
        **({"seen": host_view_summary(text)} if args.host_view else {}),
        "target_ms": 50,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }
    print(json.dumps(result, indent=2))
    return 0 if result["scrape"]["median_ms"] <= 50 else 1


if __name__ == "__main__":
    sys.exit(main())
