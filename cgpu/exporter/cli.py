"""`cgpu exporter`: serve Prometheus metrics for every container slice and GPU of this node."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from dataclasses import dataclass
from types import FrameType

from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from cgpu.core.containers import DEFAULT_STATE_DIR
from cgpu.exporter.collector import CgpuCollector
from cgpu.exporter.nvml import NvmlSource
from cgpu.exporter.podresources import DEFAULT_RESOURCE, DEFAULT_SOCKET, PodResourcesSource
from cgpu.exporter.server import MetricsServer

log = logging.getLogger("cgpu.exporter")


@dataclass(frozen=True)
class Config:
    """The options of `cgpu exporter`, read once from the command line."""

    port: int = 9445
    address: str = "0.0.0.0"
    state_dir: str = DEFAULT_STATE_DIR
    pod_resources_socket: str = DEFAULT_SOCKET
    resource_name: str = DEFAULT_RESOURCE
    nvml_retry: float = 30.0
    log_level: str = "INFO"

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Config:
        """The config the parsed options describe."""
        return cls(
            port=args.port,
            address=args.address,
            state_dir=args.state_dir,
            pod_resources_socket=args.pod_resources_socket,
            resource_name=args.resource_name,
            nvml_retry=args.nvml_retry,
            log_level=args.log_level,
        )


def register(parser: argparse.ArgumentParser) -> None:
    """Add the exporter's options."""
    parser.add_argument(
        "--port", type=int, default=9445, help="TCP port (default 9445; 0 picks one)"
    )
    parser.add_argument("--address", default="0.0.0.0", help="address to bind (default 0.0.0.0)")
    parser.add_argument(
        "--state-dir",
        default=DEFAULT_STATE_DIR,
        help=f"cgpu state dir (default {DEFAULT_STATE_DIR})",
    )
    parser.add_argument(
        "--pod-resources-socket",
        default=DEFAULT_SOCKET,
        help=f"kubelet pod-resources socket (default {DEFAULT_SOCKET}); labels fall back to "
        "meta.json when it is absent",
    )
    parser.add_argument(
        "--resource-name",
        default=DEFAULT_RESOURCE,
        help=f"the device plugin's resource, matched in pod-resources (default {DEFAULT_RESOURCE})",
    )
    parser.add_argument(
        "--nvml-retry",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how often to retry NVML initialisation while it fails (default 30)",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )


def build_registry(config: Config) -> tuple[CollectorRegistry, CgpuCollector]:
    """A registry with the cgpu collector and the exporter's own process metrics."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    collector = CgpuCollector(
        config.state_dir,
        gpus=NvmlSource(retry_interval=config.nvml_retry),
        pods=PodResourcesSource(config.pod_resources_socket, config.resource_name),
    )
    registry.register(collector)
    return registry, collector


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT."""
    return serve(Config.from_args(args))


def serve(config: Config) -> int:
    """Serve until SIGTERM or SIGINT."""
    logging.basicConfig(
        level=getattr(logging, config.log_level), format="%(asctime)s cgpu exporter: %(message)s"
    )
    registry, _ = build_registry(config)
    where = f"{config.address}:{config.port}"
    try:
        server = MetricsServer(registry, config.address, config.port)
    except OSError as exc:
        print(f"cgpu exporter: cannot listen on {where}: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.start()
    host = f"[{config.address}]" if ":" in config.address else config.address
    # One line on stdout so that scripts (and the tests) can learn the port when --port 0.
    print(f"cgpu exporter: serving http://{host}:{server.port}/metrics", flush=True)
    log.info(
        "state dir %s, pod-resources socket %s", config.state_dir, config.pod_resources_socket
    )
    while not stop.wait(3600):
        pass
    server.stop()
    return 0
