"""Building a Plugin from the command-line options: GPUs, unit, shim, API server."""

from __future__ import annotations

import logging
from pathlib import Path

import pynvml

from cgpu.core import context_cost, hostfiles, ownership, paths
from cgpu.core.gpus import GPU, GPUError
from cgpu.core.layout import (
    ENV_VOLCANO_ALLOCATED,
    SOURCE_DEVICE_PLUGIN,
    VOLCANO_GPU_INDEX,
    VOLCANO_GPU_MEMORY,
    VOLCANO_GPU_NUMBER,
)
from cgpu.core.podresources import PodResources
from cgpu.deviceplugin.config.config import Config
from cgpu.deviceplugin.errors import SetupError
from cgpu.deviceplugin.kube import client as kube
from cgpu.deviceplugin.kube.lookup import PodLookup
from cgpu.deviceplugin.plugin.kubelet import socket_name
from cgpu.deviceplugin.plugin.plugin import Endpoint, Plugin, Serving
from cgpu.deviceplugin.plugin.response import ResponseBuilder
from cgpu.deviceplugin.rm import gpus, volcano
from cgpu.deviceplugin.rm.assignments import Assignments, gpushare_marker
from cgpu.deviceplugin.rm.compute import UNITS_PER_GPU, ComputePolicy, compute_inventory
from cgpu.deviceplugin.rm.health import HealthWatcher
from cgpu.deviceplugin.rm.inventory import Inventory, id_prefix
from cgpu.deviceplugin.rm.memory import MemoryPolicy
from cgpu.deviceplugin.rm.mps import MpsHealthWatcher, MpsInjection
from cgpu.deviceplugin.rm.pairing import Pairing
from cgpu.deviceplugin.rm.policy import AllocationPolicy, Host
from cgpu.deviceplugin.rm.units import choose_unit
from cgpu.deviceplugin.rm.volcano_policy import VolcanoPolicy, volcano_marker

log = logging.getLogger(__name__)


def build(config: Config) -> Plugin:
    """Discover GPUs, choose the unit, install the shim and connect to the API server."""
    try:
        found = gpus.discover()
    except (pynvml.NVMLError, GPUError) as err:
        raise SetupError(f"NVML failed: {err} (is the NVIDIA driver installed?)") from err
    try:  # only GPUs the DRA driver does not own (held until the process ends)
        node = kube.node_name(config.node_name)
        state = config.state_dir.resolve()
        _, found, _ = ownership.claim(state, SOURCE_DEVICE_PLUGIN, node, found, config.gpus)
    except (ownership.OwnershipError, OSError) as err:
        raise SetupError(str(err)) from err
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
            VOLCANO_GPU_MEMORY,
            choice.unit.mib,
            choice.unit.mib,
            VOLCANO_GPU_MEMORY,
            ENV_VOLCANO_ALLOCATED,
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

    client = kube.connect(config.kubeconfig, node)
    log.info("API server: %s", f"node {node}" if client else "none, running standalone")
    if volcano_mode and client is None:
        raise SetupError(
            f"--resource-name {VOLCANO_GPU_MEMORY} needs the API server (the pods' "
            f"{VOLCANO_GPU_INDEX} and the node's {VOLCANO_GPU_NUMBER}): pass --kubeconfig, "
            "set KUBECONFIG, or run in-cluster"
        )
    mps = MpsInjection(config.mps_root.resolve()) if config.isolation == "mps" else None
    if volcano_mode and mps is not None:
        raise SetupError(
            f"--isolation mps is not available with --resource-name {VOLCANO_GPU_MEMORY}"
        )
    compute = config.compute_resource if not volcano_mode else ""
    if compute and compute == config.resource_name:
        raise SetupError(f"--compute-resource {compute} is the memory resource's name")
    contexts = context_costs(state_dir, mps is not None)
    host = Host(state_dir, config.resource_name, compute or None, mps, contexts)
    pairing = Pairing(state_dir, found, mps=mps is not None, contexts=contexts)
    lookup = PodLookup(client) if client is not None else None
    marker = volcano_marker if volcano_mode else gpushare_marker
    assignments = Assignments(host, lookup, pairing, marker)
    policy: AllocationPolicy = (VolcanoPolicy if volcano_mode else MemoryPolicy)(
        inventory, assignments
    )
    health = HealthWatcher(inventory, config.health_recovery, config.ignore_xid)
    extra, extra_pod_resources = [], []
    if compute:
        compute_units = compute_inventory(inventory)
        extra.append(
            Endpoint(
                socket_name(compute),
                compute,
                compute_units,
                ComputePolicy(compute_units, assignments, compute),
            )
        )
        extra_pod_resources.append(PodResources(config.pod_resources_socket, compute))
        log.info("also advertising %s: %d per GPU", compute, UNITS_PER_GPU)
    watchers = []
    if mps is not None:
        watchers.append(MpsHealthWatcher(inventory, mps.root))
        log.info("isolation: MPS, daemons under %s", mps.root)
    serving = Serving(
        kubelet_dir=config.kubelet_dir,
        socket_name=socket_name(config.resource_name),
        resource=config.resource_name,
        state_dir=state_dir,
        cleanup_interval=config.cleanup_interval,
        cleanup_grace=config.cleanup_grace,
    )
    pod_resources = PodResources(config.pod_resources_socket, config.resource_name)
    return Plugin(
        serving,
        inventory,
        policy,
        ResponseBuilder(shim, preload),
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
            VOLCANO_GPU_MEMORY,
        )
    sizes = {g.total_bytes // (1 << 20) for g in found}
    if len(sizes) > 1:
        log.warning(
            "GPUs of different sizes (%s MiB): Volcano's scheduler assumes every card has "
            "the node's %s divided by %s",
            ", ".join(str(s) for s in sorted(sizes)),
            VOLCANO_GPU_MEMORY,
            VOLCANO_GPU_NUMBER,
        )
    return "MiB"
