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

from cgpu.core.config import ConfigError, parse_size
from cgpu.core.containers import DEFAULT_STATE_DIR
from cgpu.core.hostview import Attributor
from cgpu.core.layout import GPU_MEM, POD_RESOURCES_SOCKET
from cgpu.exporter.collector import CgpuCollector
from cgpu.exporter.enforce import Enforcer
from cgpu.exporter.nvml import NvmlSource
from cgpu.exporter.podresources import PodResourcesSource
from cgpu.exporter.server import MetricsServer

log = logging.getLogger("cgpu.exporter")


DEFAULT_ALLOWANCE = 512 << 20


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e7:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


@dataclass(frozen=True)
class Config:
    """The options of `cgpu exporter`, read once from the command line."""

    port: int = 9445
    address: str = "0.0.0.0"
    state_dir: str = DEFAULT_STATE_DIR
    pod_resources_socket: str = POD_RESOURCES_SOCKET
    resource_name: str = GPU_MEM
    nvml_retry: float = 30.0
    log_level: str = "INFO"
    host_view: bool = True
    over_slice_allowance: int = DEFAULT_ALLOWANCE
    enforce: bool = False
    enforce_grace: float = 30.0
    enforce_interval: float = 5.0

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
            host_view=args.host_view,
            over_slice_allowance=args.over_slice_allowance,
            enforce=args.enforce,
            enforce_grace=args.enforce_grace,
            enforce_interval=args.enforce_interval,
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
        default=POD_RESOURCES_SOCKET,
        help=f"kubelet pod-resources socket (default {POD_RESOURCES_SOCKET}); labels fall back to "
        "meta.json when it is absent",
    )
    parser.add_argument(
        "--resource-name",
        default=GPU_MEM,
        help=f"the device plugin's resource, matched in pod-resources (default {GPU_MEM})",
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
    parser.add_argument(
        "--no-host-view",
        dest="host_view",
        action="store_false",
        help="do not attribute NVML's GPU processes to containers (no host_used, over_slice)",
    )
    parser.add_argument(
        "--over-slice-allowance",
        type=_size,
        default=DEFAULT_ALLOWANCE,
        metavar="SIZE",
        help="how far a container's host-observed use may exceed its slice before it is over "
        "(context overhead and memory the driver takes outside the shim; default 512MiB)",
    )
    parser.add_argument(
        "--enforce",
        action="store_true",
        help="SIGKILL the GPU processes of a container that stays over its slice for the grace "
        "period (off by default)",
    )
    parser.add_argument(
        "--enforce-grace",
        type=_seconds,
        default=30.0,
        metavar="SECONDS",
        help="how long a container must stay over its slice before --enforce kills (default 30)",
    )
    parser.add_argument(
        "--enforce-interval",
        type=_seconds,
        default=5.0,
        metavar="SECONDS",
        help="how often --enforce checks (default 5)",
    )


def build_registry(config: Config) -> tuple[CollectorRegistry, CgpuCollector]:
    """A registry with the cgpu collector and the exporter's own process metrics."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    enforcer = None
    if config.enforce:
        enforcer = Enforcer(config.enforce_grace, config.over_slice_allowance)
    collector = CgpuCollector(
        config.state_dir,
        gpus=NvmlSource(retry_interval=config.nvml_retry),
        pods=PodResourcesSource(config.pod_resources_socket, config.resource_name),
        attributor=Attributor() if config.host_view or config.enforce else None,
        allowance=config.over_slice_allowance,
        enforcer=enforcer,
    )
    registry.register(collector)
    return registry, collector


def _check(collector: CgpuCollector) -> None:
    """One enforcement check; an error is logged and the next check goes on."""
    try:
        collector.enforce()
    except Exception:
        log.exception("enforcement check failed")


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT."""
    return serve(Config.from_args(args))


def serve(config: Config) -> int:
    """Serve until SIGTERM or SIGINT."""
    logging.basicConfig(
        level=getattr(logging, config.log_level), format="%(asctime)s cgpu exporter: %(message)s"
    )
    registry, collector = build_registry(config)
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
    log.info("state dir %s, pod-resources socket %s", config.state_dir, config.pod_resources_socket)
    if config.enforce:
        log.info(
            "enforcing: kill after %.0fs over the slice (+%d bytes allowed), checking every %.1fs",
            config.enforce_grace, config.over_slice_allowance, config.enforce_interval,
        )  # fmt: skip
    while not stop.wait(config.enforce_interval if config.enforce else 3600):
        if config.enforce:
            _check(collector)
    server.stop()
    return 0
