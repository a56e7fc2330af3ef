"""`cgpu dra-driver`: options, start-up and the main loop."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from collections.abc import Callable

from cgpu.core import context_cost, ownership, paths
from cgpu.core.containers import DEFAULT_STATE_DIR
from cgpu.core.gpus import GPUError
from cgpu.core.hostfiles import install_shim, write_preload
from cgpu.core.layout import CDI_DIR, KUBELET_DIR, SOURCE_DRA
from cgpu.dra import inventory as inv
from cgpu.dra.checkpoint import Checkpoint
from cgpu.dra.config import Config
from cgpu.dra.health import HealthWatcher
from cgpu.dra.healthservice import HealthService
from cgpu.dra.kubeapi import KubeError, connect
from cgpu.dra.prepare import PrepareConfig, Preparer
from cgpu.dra.service import Servers
from cgpu.dra.slices import Publisher

log = logging.getLogger("cgpu.dra")

RESYNC_S = 60.0  # republish this often, repairing a slice someone else changed or deleted
RETAKE_S = 5.0  # try this often to own the GPUs the device plugin held at start-up


def register(parser: argparse.ArgumentParser) -> None:
    """Options of `cgpu dra-driver`."""
    parser.add_argument("--kubelet-dir", default=KUBELET_DIR, help="default %(default)s")
    parser.add_argument("--state-dir", default=DEFAULT_STATE_DIR, help="default %(default)s")
    parser.add_argument(
        "--cdi-dir", default=CDI_DIR, help="CDI specs of claims (default %(default)s)"
    )
    parser.add_argument(
        "--kubeconfig",
        help="API-server access; wins when given (else $KUBECONFIG, in-cluster, ~/.kube/config)",
    )
    parser.add_argument(
        "--health-recovery",
        type=_seconds,
        default=300.0,
        metavar="SECONDS",
        help="publish a GPU again this long after its last critical XID; 0: never "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--gpus", type=ownership.gpus_argument, default=None, help=ownership.GPUS_HELP
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="default %(default)s",
    )


def _seconds(text: str) -> float:
    """A duration of 0 seconds or more."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def _idle(wake: threading.Event, timeout: float, retake: Callable[[], None]) -> None:
    """Wait up to `timeout` for `wake`, calling `retake` every RETAKE_S meanwhile."""
    deadline = time.monotonic() + timeout
    while not wake.wait(max(0.0, min(RETAKE_S, deadline - time.monotonic()))):
        if time.monotonic() >= deadline:
            return
        try:
            retake()
        except OSError as err:
            log.warning("cannot take GPUs that came free: %s", err)


def run(args: argparse.Namespace) -> int:
    """Start the driver and serve until SIGTERM or SIGINT."""
    config = Config.from_args(args)
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        state_dir = config.state_dir
        every = inv.discover()  # offered: only GPUs the device plugin does not own
        owner, found, _ = ownership.claim(
            state_dir, SOURCE_DRA, config.node_name, every, config.gpus
        )
        api = connect(config.kubeconfig, config.node_name)
        shim = install_shim(paths.shim_path(), state_dir)
        preload = write_preload(state_dir)
    except (GPUError, KubeError, OSError, ownership.OwnershipError) as err:
        log.error("cannot start: %s", err)
        return 1
    inventory = inv.Inventory(found)
    for gpu in found:
        log.info("GPU %d %s (%s): %d MiB", gpu.index, gpu.uuid, gpu.name, gpu.total_bytes >> 20)
    contexts = context_cost.ensure(state_dir)  # in this environment: the simulator's, if so
    for uuid, size in sorted(contexts.items()):
        log.info("GPU %s: a CUDA context takes %d MiB", uuid, size >> 20)
    settings = PrepareConfig(
        state_dir, config.cdi_dir, shim, preload, pool=config.node_name, contexts=contexts
    )
    preparer = Preparer(inventory, settings, api, Checkpoint(state_dir))
    publisher = Publisher(api, inventory)
    wake = threading.Event()
    inventory.on_change = wake.set
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: (stop.set(), wake.set()))
    try:
        watch = HealthService(inventory, config.node_name, threading.Event())
        servers = Servers(preparer, watch, config.dra_socket, config.registration_socket)
    except (OSError, RuntimeError) as err:  # grpc raises RuntimeError when it cannot bind
        log.error("cannot serve on %s: %s", config.kubelet_dir, err)
        return 1
    health = HealthWatcher(inventory, config.health_recovery)
    health.start()
    try:
        while not stop.is_set():
            try:
                publisher.publish()
            except KubeError as err:
                log.warning("publishing the resourceslice failed: %s; retrying", err)
                wake.wait(5.0)
                wake.clear()
                continue
            _idle(wake, RESYNC_S, lambda: inventory.add(owner.take_free(every, config.gpus)))
            wake.clear()
    finally:
        health.stop()
        servers.stop()
    log.info("stopped; the resourceslice stays published for the claims still prepared")
    return 0
