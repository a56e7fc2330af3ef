"""The device plugin's options as one typed, frozen object, built once from the command line."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from cgpu.core.layout import (
    DEFAULT_STATE_DIR,
    DEVICE_PLUGIN_DIR,
    GPU_CORE,
    GPU_MEM,
    MPS_ROOT,
    POD_RESOURCES_SOCKET,
)

__all__ = ["ISOLATIONS", "Config"]
ISOLATIONS = ("shim", "mps")


@dataclass(frozen=True)
class Config:
    """The options of `cgpu device-plugin`, read once from the command line."""

    kubelet_dir: Path = Path(DEVICE_PLUGIN_DIR)
    memory_unit: str | None = None  # None: the mode's default (GiB; MiB for Volcano)
    resource_name: str = GPU_MEM
    state_dir: Path = Path(DEFAULT_STATE_DIR)
    pod_resources_socket: str = POD_RESOURCES_SOCKET
    host_shim_path: Path | None = None
    kubeconfig: str | None = None
    node_name: str | None = None
    health_recovery: float = 300.0
    ignore_xid: tuple[int, ...] = ()
    cleanup_interval: float = 30.0
    cleanup_grace: float = 600.0
    log_level: str = "INFO"
    compute_resource: str = GPU_CORE  # "" serves no compute resource
    isolation: str = "shim"
    mps_root: Path = Path(MPS_ROOT)
    gpus: frozenset[str] | None = None  # --gpus: the GPUs it may own (None: all)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Config:
        """The config the parsed options describe."""
        return cls(
            kubelet_dir=args.kubelet_dir,
            memory_unit=args.memory_unit,
            resource_name=args.resource_name,
            state_dir=args.state_dir,
            pod_resources_socket=args.pod_resources_socket,
            host_shim_path=args.host_shim_path,
            kubeconfig=args.kubeconfig,
            node_name=args.node_name,
            health_recovery=args.health_recovery,
            ignore_xid=tuple(args.ignore_xid),
            cleanup_interval=args.cleanup_interval,
            cleanup_grace=args.cleanup_grace,
            log_level=args.log_level,
            compute_resource=args.compute_resource,
            isolation=args.isolation,
            mps_root=args.mps_root,
            gpus=args.gpus,
        )
