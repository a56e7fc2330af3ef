"""`cgpu device-plugin`: its flags, start-up, and signal handling."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from cgpu.core import ownership, paths
from cgpu.core.layout import (
    DEFAULT_STATE_DIR,
    DEVICE_PLUGIN_DIR,
    GPU_CORE,
    GPU_MEM,
    MPS_ROOT,
    POD_RESOURCES_SOCKET,
    VOLCANO_GPU_MEMORY,
)
from cgpu.deviceplugin.cmd.setup import build
from cgpu.deviceplugin.config.config import (
    ISOLATIONS,
    Config,
)
from cgpu.deviceplugin.errors import SetupError

log = logging.getLogger("deviceplugin")


def register(parser: argparse.ArgumentParser) -> None:
    """Add the device plugin's options to its subcommand parser."""
    add = parser.add_argument
    add(
        "--kubelet-dir",
        default=DEVICE_PLUGIN_DIR,
        type=Path,
        help="the kubelet's device-plugin directory, holding kubelet.sock (default: %(default)s)",
    )
    add(
        "--memory-unit",
        choices=("GiB", "MiB"),
        default=None,
        help="memory per advertised device (default: GiB; always MiB with --resource-name "
        f"{VOLCANO_GPU_MEMORY}); made coarser, with a log line, when the device list would "
        "exceed the kubelet's 4 MiB message limit",
    )
    add(
        "--resource-name",
        default=GPU_MEM,
        help="extended resource to advertise (default: %(default)s)",
    )
    add(
        "--state-dir",
        default=DEFAULT_STATE_DIR,
        type=Path,
        help="host directory for container directories and the shim (default: %(default)s)",
    )
    add(
        "--pod-resources-socket",
        default=POD_RESOURCES_SOCKET,
        help="the kubelet's pod-resources socket, used for cleanup (default: %(default)s)",
    )
    add(
        "--host-shim-path",
        type=Path,
        default=None,
        help="the shim's path on the host, mounted as is; by default the installed shim "
        f"({paths.shim_path()}) is copied to <state-dir>/lib/libcgpu.so and that is mounted",
    )
    add(
        "--kubeconfig",
        default=None,
        help="kubeconfig for the API server; wins when given (else $KUBECONFIG, in-cluster, "
        "~/.kube/config; with none, standalone)",
    )
    add(
        "--node-name",
        default=None,
        help="this node's name in the API server (default: $NODE_NAME, else the host name)",
    )
    add(
        "--health-recovery",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="a GPU marked Unhealthy by an XID is Healthy again after this long without "
        "another critical XID; 0 keeps it Unhealthy until restart (default: %(default)s)",
    )
    add(
        "--ignore-xid",
        type=int,
        action="append",
        default=[],
        metavar="XID",
        help="treat this XID as an application error too (repeatable); 13, 31, 43, 45, 68 "
        "and 109 always are",
    )
    add(
        "--cleanup-interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="how often to remove directories of containers that are gone (default: %(default)s)",
    )
    add(
        "--cleanup-grace",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="minimum age of a directory before cleanup may remove it (default: %(default)s)",
    )
    add(
        "--compute-resource",
        default=GPU_CORE,
        help="also advertise this resource, 100 units per GPU, for a container's share of a "
        'GPU\'s compute (default: %(default)s; "" for none; never in Volcano mode)',
    )
    add(
        "--isolation",
        choices=ISOLATIONS,
        default="shim",
        help="shim: the shim enforces memory and compute; mps: containers also use their GPU's "
        "MPS control daemon (cgpu mps-daemon), which enforces the compute share and a pinned "
        "memory limit (default: %(default)s)",
    )
    add(
        "--mps-root",
        type=Path,
        default=MPS_ROOT,
        help="the host directory of cgpu mps-daemon's pipe, log and shm directories "
        "(default: %(default)s)",
    )
    add("--gpus", type=ownership.gpus_argument, default=None, help=ownership.GPUS_HELP)
    add("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))


def run(args: argparse.Namespace) -> int:
    """Start the plugin and serve until SIGTERM or SIGINT."""
    return serve(Config.from_args(args))


def serve(config: Config) -> int:
    """Start the plugin and serve until SIGTERM or SIGINT."""
    logging.basicConfig(
        level=config.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        plugin = build(config)
    except SetupError as err:
        print(f"cgpu device-plugin: {err}", file=sys.stderr)
        return 1

    def stop(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        plugin.stop.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return plugin.run()
