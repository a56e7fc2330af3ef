"""Talking to one GPU's MPS control daemon through `nvidia-cuda-mps-control`.

`nvidia-cuda-mps-control -d` starts the control daemon and returns once it is running; the
same program without `-d` is the client: it reads commands on stdin, passes them to the
daemon found through `CUDA_MPS_PIPE_DIRECTORY`, prints the answers, and fails when no daemon
answers. Commands used (NVIDIA's MPS documentation, and its k8s-device-plugin):
`set_default_active_thread_percentage <percent>`,
`set_default_device_pinned_mem_limit <device> <value>` (for example `0 4096M`),
`get_default_active_thread_percentage` (a cheap liveness probe) and `quit`.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cgpu.core import mpslayout

CONTROL_BINARY = "nvidia-cuda-mps-control"
MIB = 1 << 20


class ControlError(RuntimeError):
    """The control program failed, timed out, or is missing."""


@dataclass(frozen=True)
class Control:
    """The control daemon of one GPU under `root`."""

    root: Path
    uuid: str
    binary: str = CONTROL_BINARY
    timeout: float = 10.0

    @property
    def pipe_dir(self) -> Path:
        return mpslayout.pipe_dir(self.root, self.uuid)

    @property
    def log_dir(self) -> Path:
        return mpslayout.log_dir(self.root, self.uuid)

    def environment(self) -> dict[str, str]:
        """The daemon's (and its client's) environment: only this GPU, its directories."""
        return {
            **os.environ,
            "CUDA_VISIBLE_DEVICES": self.uuid,
            "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir),
            "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir),
        }

    def _run(self, args: list[str], stdin: str) -> str:
        try:
            done = subprocess.run(
                [self.binary, *args],
                input=stdin,
                capture_output=True,
                text=True,
                env=self.environment(),
                timeout=self.timeout,
                check=False,
            )
        except FileNotFoundError:
            raise ControlError(
                f"{self.binary} not found (is the NVIDIA driver's MPS installed?)"
            ) from None
        except subprocess.TimeoutExpired:
            raise ControlError(
                f"{self.binary} {' '.join(args)}: no answer in {self.timeout}s"
            ) from None
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
            raise ControlError(f"{self.binary} {' '.join(args)}: {detail}")
        return done.stdout

    def start(self) -> None:
        """Create the directories and start the control daemon (`-d` returns once it runs)."""
        self.pipe_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
        self.log_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
        self._run(["-d"], "")

    def send(self, command: str) -> str:
        """One command through the client; returns what the daemon answered."""
        return self._run([], command + "\n").strip()

    def configure(self, thread_percentage: int | None, pinned_bytes: int | None) -> None:
        """Set the per-client defaults: device 0 is this daemon's only GPU."""
        if thread_percentage is not None:
            self.send(f"set_default_active_thread_percentage {thread_percentage}")
        if pinned_bytes is not None:
            self.send(f"set_default_device_pinned_mem_limit 0 {max(1, pinned_bytes // MIB)}M")

    def alive(self) -> bool:
        """Whether the daemon answers a harmless query."""
        try:
            self.send("get_default_active_thread_percentage")
        except ControlError:
            return False
        return True

    def quit(self) -> None:
        """Ask the daemon to exit."""
        self.send("quit")
