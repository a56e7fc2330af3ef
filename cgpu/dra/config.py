"""The DRA driver's options as one typed, frozen object, built once from the command line."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from cgpu.core.containers import DEFAULT_STATE_DIR
from cgpu.core.layout import CDI_DIR, DRA_DRIVER, KUBELET_DIR
from cgpu.dra.names import DRA_SOCKET, REGISTRATION_SOCKET


@dataclass(frozen=True)
class Config:
    """The options of `cgpu dra-driver`, read once from the command line."""

    kubelet_dir: Path = Path(KUBELET_DIR)
    state_dir: Path = Path(DEFAULT_STATE_DIR)
    cdi_dir: Path = Path(CDI_DIR)
    node_name: str = ""
    kubeconfig: str | None = None
    health_recovery: float = 300.0
    log_level: str = "INFO"
    gpus: frozenset[str] | None = None  # --gpus: the GPUs it may own (None: all)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Config:
        """The config the parsed options describe; the node is $NODE_NAME, else the host's."""
        return cls(
            kubelet_dir=Path(args.kubelet_dir).absolute(),
            state_dir=Path(args.state_dir).absolute(),
            cdi_dir=Path(args.cdi_dir).absolute(),
            node_name=os.environ.get("NODE_NAME") or os.uname().nodename,
            kubeconfig=args.kubeconfig,
            health_recovery=args.health_recovery,
            log_level=args.log_level,
            gpus=args.gpus,
        )

    @property
    def registration_socket(self) -> Path:
        """The socket the kubelet's plugin watcher finds."""
        return self.kubelet_dir / "plugins_registry" / REGISTRATION_SOCKET

    @property
    def dra_socket(self) -> Path:
        """The socket that serves the DRA API."""
        return self.kubelet_dir / "plugins" / DRA_DRIVER / DRA_SOCKET
