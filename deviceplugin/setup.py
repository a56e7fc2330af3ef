"""Building a Plugin from the command-line options: GPUs, unit, shim, API server."""

from __future__ import annotations

import logging
from pathlib import Path

import pynvml

from cgpu.core import context_cost, paths
from cgpu.core.gpus import GPU, GPUError
from cgpu.core.podresources import PodResources
from cgpu.deviceplugin import gpus, hostfiles, kube, volcano
from cgpu.deviceplugin.allocator import Allocator, Settings
from cgpu.deviceplugin.cli import socket_name as socket_file
from cgpu.deviceplugin.compute import UNITS_PER_GPU, ComputeAllocator, compute_inventory
from cgpu.deviceplugin.config import Config
from cgpu.deviceplugin.health import HealthWatcher
from cgpu.deviceplugin.inventory import Inventory, id_prefix
from cgpu.deviceplugin.mps import MpsHealthWatcher, MpsInjection
from cgpu.deviceplugin.pairing import Pairing
from cgpu.deviceplugin.plugin import Endpoint, Options, Plugin
from cgpu.deviceplugin.units import choose_unit
from cgpu.deviceplugin.volcano_allocator import VolcanoAllocator

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
    volcano_mode = volcano.is_volcano(config.resource_name)
    base = memory_base(config, found)
    try:
        choice = choose_unit([(id_prefix(g, volcano_mode), g.total_bytes) for g in found], base)
    except ValueError as err:
        raise SetupError(str(err)) from err
    (log.warning if choice.coarsened else log.info)("%s", choice.explain())
    if volcano_mode and choice.coarsened:
        log.warning(
            "Volcano mode: each %s now counts %d MiB (as Volcano's --gpu-memory-factor=%d): "
            "a pod's %s limit is read in these units and %s reports MiB",
            volcano.RESOURCE,
            choice.unit.mib,
            choice.unit.mib,
            volcano.RESOURCE,
            volcano.ENV_ALLOCATED,
        )
    inventory = Inventory(found, choice.unit, index_ids=volcano_mode)
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
    if volcano_mode and client is None:
        raise SetupError(
            f"--resource-name {volcano.RESOURCE} needs the API server (the pods' "
            f"{volcano.GPU_INDEX} and the node's {volcano.GPU_NUMBER}): pass --kubeconfig, "
            "set KUBECONFIG, or run in-cluster"
        )
    mps = MpsInjection(config.mps_root.resolve()) if config.isolation == "mps" else None
    if volcano_mode and mps is not None:
        raise SetupError(
            f"--isolation mps is not available with --resource-name {volcano.RESOURCE}"
        )
    compute = config.compute_resource if not volcano_mode else ""
    if compute and compute == config.resource_name:
        raise SetupError(f"--compute-resource {compute} is the memory resource's name")
    contexts = context_costs(state_dir, mps is not None)
    settings = Settings(
        state_dir, config.resource_name, shim, preload, compute or None, mps, contexts
    )
    pairing = Pairing(state_dir, found, mps=mps is not None, contexts=contexts)
    allocator = (VolcanoAllocator if volcano_mode else Allocator)(
        inventory, settings, client, pairing
    )
    health = HealthWatcher(inventory, config.health_recovery, config.ignore_xid)
    extra, extra_pod_resources = [], []
    if compute:
        compute_units = compute_inventory(inventory)
        extra.append(
            Endpoint(
                socket_file(compute),
                compute,
                compute_units,
                ComputeAllocator(compute_units, allocator, compute),
            )
        )
        extra_pod_resources.append(PodResources(config.pod_resources_socket, compute))
        log.info("also advertising %s: %d per GPU", compute, UNITS_PER_GPU)
    watchers = []
    if mps is not None:
        watchers.append(MpsHealthWatcher(inventory, mps.root))
        log.info("isolation: MPS, daemons under %s", mps.root)
    options = Options(
        kubelet_dir=config.kubelet_dir,
        socket_name=socket_name,
        resource=config.resource_name,
        cleanup_interval=config.cleanup_interval,
        cleanup_grace=config.cleanup_grace,
    )
    pod_resources = PodResources(config.pod_resources_socket, config.resource_name)
    return Plugin(
        options,
        inventory,
        allocator,
        health,
        pod_resources,
        client,
        extra=extra,
        watchers=watchers,
        extra_pod_resources=extra_pod_resources,
    )


def context_costs(state_dir: Path, mps: bool) -> dict[str, int]:
    """What a CUDA context costs per GPU (cached in the state dir), for every cgpu.conf.

    Measured in this process's environment, so on the simulator when the plugin runs on it.
    Under MPS a client's context is not what the measurement sees: the shim measures it.
    """
    if mps:
        return {}
    costs = context_cost.ensure(state_dir)
    for uuid, size in sorted(costs.items()):
        log.info("GPU %s: a CUDA context takes %d MiB", uuid, size >> 20)
    return costs


def memory_base(config: Config, found: list[GPU]) -> str:
    """The unit base: the option, GiB by default; MiB whatever was asked in Volcano mode."""
    if not volcano.is_volcano(config.resource_name):
        return config.memory_unit or "GiB"
    if config.memory_unit == "GiB":
        log.warning(
            "--memory-unit GiB ignored: Volcano counts %s in MiB, so the plugin advertises "
            "MiB units",
            volcano.RESOURCE,
        )
    sizes = {g.total_bytes // (1 << 20) for g in found}
    if len(sizes) > 1:
        log.warning(
            "GPUs of different sizes (%s MiB): Volcano's scheduler assumes every card has "
            "the node's %s divided by %s",
            ", ".join(str(s) for s in sorted(sizes)),
            volcano.RESOURCE,
            volcano.GPU_NUMBER,
        )
    return "MiB"
