"""`cgpu scheduler-extender`: parse flags, connect, list+watch, serve."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from dataclasses import dataclass, field

from cgpu.core.kube import KubeConfigError
from cgpu.core.podcontract import POLICIES

from .binder import Binder
from .handlers import Handlers
from .informer import Informer, start_informers
from .kubeapi import KubeApi, load_configuration
from .metrics import Metrics
from .server import ExtenderServer
from .state import ClusterState

log = logging.getLogger("cgpu.scheduler")
DEFAULT_PORT = 32766
NEIGHBOURS = ("count", "ignore")  # --unlimited-neighbours


def register(parser: argparse.ArgumentParser) -> None:
    """Add the subcommand's flags."""
    parser.add_argument("--address", default="0.0.0.0", help="listen address (default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="listen port (32766)")
    parser.add_argument(
        "--kubeconfig",
        help="kubeconfig; wins when given (else $KUBECONFIG, in-cluster, ~/.kube/config)",
    )
    parser.add_argument("--node-policy", choices=POLICIES, default="binpack")
    parser.add_argument("--gpu-policy", choices=POLICIES, default="binpack")
    parser.add_argument(
        "--assume-timeout",
        type=float,
        default=30.0,
        help="seconds a bound pod's units stay assumed before the watch must show it (30)",
    )
    parser.add_argument(
        "--unlimited-neighbours",
        choices=NEIGHBOURS,
        default="ignore",
        help="ignore: a GPU's compute limits add up to 100%%, whatever pods without a limit "
        "run there (they are best effort under cgpu compute-arbiter); count: for nodes "
        "without the arbiter, where beside u such pods the limited ones get at most "
        "100/(u+1)%% together, and are placed so (ignore)",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (INFO)")


@dataclass
class Extender:
    """A running extender: state, informers, HTTP server and the assume-cache reaper."""

    state: ClusterState
    informers: list[Informer]
    server: ExtenderServer
    stop_event: threading.Event = field(default_factory=threading.Event)

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    def stop(self) -> None:
        self.stop_event.set()
        self.server.stop()
        for informer in self.informers:
            informer.stop()


def build(
    api: KubeApi,
    address: str = "127.0.0.1",
    port: int = 0,
    node_policy: str = "binpack",
    gpu_policy: str = "binpack",
    assume_timeout: float = 30.0,
    unlimited_neighbours: str = "ignore",
) -> Extender:
    """Start informers, the reaper and the HTTP server; return the running extender."""
    if unlimited_neighbours not in NEIGHBOURS:
        raise ValueError(f"unlimited_neighbours={unlimited_neighbours!r} is not count or ignore")
    state = ClusterState(count_unlimited=unlimited_neighbours == "count")
    metrics = Metrics()
    informers = start_informers(api, state, lambda resource: metrics.lists.labels(resource).inc())
    binder = Binder(state, api, gpu_policy, assume_timeout)

    def synced() -> bool:
        return all(i.synced.is_set() for i in informers)

    handlers = Handlers(state, binder, metrics, node_policy, gpu_policy, synced)
    server = ExtenderServer(address, port, handlers, state, metrics, synced)
    extender = Extender(state, informers, server)
    reaper = threading.Thread(target=_reap, args=(extender, assume_timeout), daemon=True)
    reaper.start()
    server.start()
    return extender


def _reap(extender: Extender, timeout: float) -> None:
    period = min(max(timeout / 4, 0.05), 1.0)
    while not extender.stop_event.wait(period):
        dropped = extender.state.expire()
        if dropped:
            log.info("released %d assumed pod(s) the watch never showed bound", dropped)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT."""
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        configuration = load_configuration(args.kubeconfig)
    except KubeConfigError as err:
        print(
            f"cgpu scheduler-extender: no usable API-server configuration: {err}", file=sys.stderr
        )
        return 1
    if args.assume_timeout <= 0:
        print("cgpu scheduler-extender: --assume-timeout must be positive", file=sys.stderr)
        return 2
    try:
        extender = build(
            KubeApi(configuration),
            args.address,
            args.port,
            args.node_policy,
            args.gpu_policy,
            args.assume_timeout,
            args.unlimited_neighbours,
        )
    except OSError as err:
        print(
            f"cgpu scheduler-extender: cannot listen on {args.address}:{args.port}: {err}",
            file=sys.stderr,
        )
        return 1
    log.info(
        "serving on %s:%d (node policy %s, GPU policy %s, unlimited neighbours: %s)",
        args.address,
        extender.server.port,
        args.node_policy,
        args.gpu_policy,
        args.unlimited_neighbours,
    )
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    extender.stop()
    return 0
