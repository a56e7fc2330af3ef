"""Building a Plugin from the command-line options: GPUs, unit, shim, API server."""

from __future__ import annotations

import logging

import pynvml

from cgpu.core import paths
from cgpu.core.gpus import GPUError
from cgpu.core.podresources import PodResources
from cgpu.deviceplugin import gpus, hostfiles, kube
from cgpu.deviceplugin.allocator import Allocator, Settings
from cgpu.deviceplugin.config import Config
from cgpu.deviceplugin.health import HealthWatcher
from cgpu.deviceplugin.inventory import Inventory
from cgpu.deviceplugin.plugin import Options, Plugin
from cgpu.deviceplugin.units import choose_unit

log = logging.getLogger(__name__)


class SetupError(Exception):
    """The plugin cannot start; the message says why."""


def build(config: Config, socket_name: str) -> Plugin:
    """Discover GPUs, choose the unit, install the shim and connect to the API server."""
    try:
        found = gpus.discover()
    except (pynvml.NVMLError, GPUError) as err:
        raise SetupError(f"NVML failed: {err} (is the NVIDIA driver installed?)") from err
    if not found:
        log.warning("NVML reports no GPUs: advertising no devices")
    try:
        choice = choose_unit([(g.uuid, g.total_bytes) for g in found], config.memory_unit)
    except ValueError as err:
        raise SetupError(str(err)) from err
    (log.warning if choice.coarsened else log.info)("%s", choice.explain())
    inventory = Inventory(found, choice.unit)
    for g in inventory.gpus:
        log.info(
            "GPU %d %s (%s): %d MiB, %d devices of %s",
            g.gpu.index,
            g.gpu.uuid,
            g.gpu.name,
            g.gpu.total_bytes >> 20,
            g.units,
            choice.unit,
        )

    state_dir = config.state_dir.resolve()
    try:
        if config.host_shim_path is not None:
            shim = config.host_shim_path
            if not shim.is_file():
                raise FileNotFoundError(f"--host-shim-path {shim} does not exist")
        else:
            shim = hostfiles.install_shim(paths.shim_path(), state_dir)
        preload = hostfiles.write_preload(state_dir)
    except OSError as err:
        raise SetupError(str(err)) from err

    node = kube.node_name(config.node_name)
    client = kube.connect(config.kubeconfig, node)
    log.info("API server: %s", f"node {node}" if client else "none, running standalone")
    settings = Settings(state_dir, config.resource_name, shim, preload)
    allocator = Allocator(inventory, settings, client)
    health = HealthWatcher(inventory, config.health_recovery, config.ignore_xid)
    options = Options(
        kubelet_dir=config.kubelet_dir,
        socket_name=socket_name,
        resource=config.resource_name,
        cleanup_interval=config.cleanup_interval,
        cleanup_grace=config.cleanup_grace,
    )
    pod_resources = PodResources(config.pod_resources_socket, config.resource_name)
    return Plugin(options, inventory, allocator, health, pod_resources, client)
