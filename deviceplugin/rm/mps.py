"""MPS isolation (`--isolation mps`): what Allocate adds, and GPU health from the daemons.

Each GPU has its own MPS control daemon (`cgpu mps-daemon`), so a container is given the pipe
directory of its GPU's daemon and the shared /dev/shm, as NVIDIA's device plugin does, plus
its limits in MPS's own variables:
- `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`: the compute request (percent of the GPU's threads);
- `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`: the memory slice, `0=<MiB>M` (device 0 is the
  container's only GPU).
The shim stays loaded and keeps accounting and reporting the slice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from cgpu.core import mpslayout
from cgpu.core.injection import Mount
from cgpu.core.layout import GPU_COUNT
from cgpu.deviceplugin.errors import AllocationError
from cgpu.deviceplugin.rm.inventory import Inventory

log = logging.getLogger(__name__)

SOURCE = "mps"
CONTAINER_SHM = "/dev/shm"
POLL = 0.5
MIB = 1 << 20


@dataclass(frozen=True)
class MpsInjection:
    """Renders the MPS part of an Allocate response for one GPU."""

    root: Path

    def environment(
        self, uuid: str, memory_bytes: int | None, compute: int | None
    ) -> dict[str, str]:
        """The MPS variables for a one-GPU container."""
        envs = {"CUDA_MPS_PIPE_DIRECTORY": str(mpslayout.pipe_dir(self.root, uuid))}
        if compute is not None:
            envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(compute)
        if memory_bytes is not None:
            envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={max(1, memory_bytes // MIB)}M"
        return envs

    def mounts(self, uuid: str) -> list[Mount]:
        """The daemon's pipe directory (at the same path) and the shared /dev/shm."""
        pipe = str(mpslayout.pipe_dir(self.root, uuid))
        return [
            Mount(host_path=pipe, container_path=pipe, read_only=False),
            Mount(
                host_path=str(mpslayout.shm_dir(self.root)),
                container_path=CONTAINER_SHM,
                read_only=False,
            ),
        ]

    def check_one_gpu(self, count: int) -> None:
        """MPS gives a process one daemon: refuse containers spread over several GPUs."""
        if count != 1:
            raise AllocationError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"--isolation mps gives each container one GPU's MPS daemon, but this "
                f"container spreads over {count} GPUs ({GPU_COUNT}); remove the "
                "label or run the plugin without MPS",
            )


class MpsHealthWatcher:
    """A thread that marks a GPU Unhealthy while its MPS daemon is not ready."""

    def __init__(
        self,
        inventory: Inventory,
        root: Path,
        max_age: float = mpslayout.DEFAULT_MAX_AGE,
        read: Callable[..., mpslayout.DaemonHealth] = mpslayout.read_health,
    ) -> None:
        self.inventory = inventory
        self.root = root
        self.max_age = max_age
        self.read = read
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mps-health", daemon=True)

    def check(self) -> None:
        """One pass over the GPUs."""
        for gpu in self.inventory.gpus:
            uuid = gpu.gpu.uuid
            state = self.read(self.root, uuid, self.max_age)
            if self.inventory.set_health(uuid, state.ready, SOURCE):
                if state.ready:
                    log.warning("GPU %s: MPS daemon ready, its devices are Healthy", uuid)
                else:
                    log.warning(
                        "GPU %s: MPS daemon not ready (%s), its devices are now Unhealthy",
                        uuid,
                        state.reason,
                    )

    def start(self) -> None:
        """Check once now, then every half second."""
        self.check()
        self._thread.start()

    def stop(self) -> None:
        """Stop watching."""
        self._stop.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.wait(POLL):
            try:
                self.check()
            except Exception:  # a bug here must not take the plugin down
                log.exception("MPS health check failed")
