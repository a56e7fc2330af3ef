"""Keeping one MPS control daemon per GPU running, and saying so in its health file.

Every `interval` seconds each daemon is probed. One that answers has its health file
refreshed ("ready"); one that does not is marked "down" at once (the device plugin then
advertises that GPU's units Unhealthy) and started again after `restart_delay` seconds, with
its defaults set again. On stop each daemon is asked to quit and marked down.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cgpu.core import mpslayout
from cgpu.mps.control import Control, ControlError

log = logging.getLogger(__name__)

EXCLUSIVE_PROCESS = "EXCLUSIVE_PROCESS"
DEFAULT_MODE = "DEFAULT"


@dataclass(frozen=True)
class SupervisorConfig:
    """How the daemons are run and configured."""

    root: Path
    binary: str
    thread_percentage: int | None
    pinned_bytes: int | None
    interval: float
    restart_delay: float
    compute_mode: str | None  # EXCLUSIVE_PROCESS, or None to leave the GPU's mode alone


@dataclass
class Daemon:
    """One GPU's daemon and what the supervisor knows of it."""

    control: Control
    ready: bool = False
    down_since: float | None = None
    restarts: int = 0
    last_error: str = field(default="not started")


class Supervisor:
    """Starts, probes and restarts the daemons of `uuids`; `stop` ends `run`."""

    def __init__(self, uuids: list[str], settings: SupervisorConfig) -> None:
        for uuid in uuids:
            mpslayout.gpu_dir(settings.root, uuid)  # ValueError for a UUID unsafe as a name
        self.settings = settings
        self.daemons = [
            Daemon(Control(settings.root, uuid, settings.binary)) for uuid in dict.fromkeys(uuids)
        ]
        self.stop = threading.Event()

    def prepare(self) -> None:
        """The shared /dev/shm directory, and the GPUs' compute mode."""
        shm = mpslayout.shm_dir(self.settings.root)
        shm.mkdir(parents=True, exist_ok=True)
        shm.chmod(0o1777)
        for daemon in self.daemons:
            self._compute_mode(daemon.control.uuid, self.settings.compute_mode)

    def _compute_mode(self, uuid: str, mode: str | None) -> None:
        """Set a GPU's compute mode with nvidia-smi, as NVIDIA's plugin does; a failure is
        logged (MPS works in the DEFAULT mode too, without keeping non-MPS clients out)."""
        if mode is None:
            return
        smi = shutil.which("nvidia-smi")
        if smi is None:
            log.warning("GPU %s: nvidia-smi not found, compute mode left as it is", uuid)
            return
        done = subprocess.run(
            [smi, "-i", uuid, "-c", mode], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            log.warning("GPU %s: nvidia-smi -c %s failed: %s", uuid, mode, done.stdout.strip())
        else:
            log.info("GPU %s: compute mode %s", uuid, mode)

    def _publish(self, daemon: Daemon) -> None:
        state = mpslayout.READY if daemon.ready else mpslayout.DOWN
        try:
            mpslayout.write_health(
                self.settings.root,
                daemon.control.uuid,
                state,
                "" if daemon.ready else daemon.last_error,
            )
        except OSError as err:
            log.error("GPU %s: cannot write its health file: %s", daemon.control.uuid, err)

    def _bring_up(self, daemon: Daemon) -> None:
        """Start the daemon unless one already answers, then set its defaults."""
        control = daemon.control
        try:
            if not control.alive():
                control.start()
                log.info(
                    "GPU %s: MPS control daemon started (pipe %s)", control.uuid, control.pipe_dir
                )
            else:
                log.info("GPU %s: MPS control daemon already running; adopting it", control.uuid)
            control.configure(self.settings.thread_percentage, self.settings.pinned_bytes)
            if not control.alive():
                raise ControlError("the daemon does not answer after starting")
        except (ControlError, OSError) as err:
            daemon.ready = False
            daemon.last_error = str(err)
            daemon.down_since = time.monotonic()
            log.error("GPU %s: MPS control daemon not up: %s", control.uuid, err)
        else:
            daemon.ready = True
            daemon.down_since = None
            daemon.last_error = ""
        self._publish(daemon)

    def check(self, now: float | None = None) -> None:
        """Probe every daemon once; mark the dead ones down and restart those due."""
        now = time.monotonic() if now is None else now
        for daemon in self.daemons:
            if daemon.ready:
                if daemon.control.alive():
                    self._publish(daemon)  # refresh: the plugin checks the file's age
                    continue
                daemon.ready = False
                daemon.down_since = now
                daemon.last_error = "the control daemon stopped answering"
                log.error("GPU %s: MPS control daemon died", daemon.control.uuid)
                self._publish(daemon)
            due = (
                daemon.down_since is None or now - daemon.down_since >= self.settings.restart_delay
            )
            if due:
                daemon.restarts += 1
                log.warning(
                    "GPU %s: restarting the MPS control daemon (restart %d)",
                    daemon.control.uuid,
                    daemon.restarts,
                )
                self._bring_up(daemon)
            else:
                self._publish(daemon)

    def run(self) -> int:
        """Bring every daemon up, then supervise until `stop`; returns the exit status."""
        self.prepare()
        for daemon in self.daemons:
            self._bring_up(daemon)
        while not self.stop.wait(self.settings.interval):
            self.check()
        self.shutdown()
        return 0

    def shutdown(self) -> None:
        """Quit every daemon and mark it down."""
        for daemon in self.daemons:
            try:
                daemon.control.quit()
            except ControlError as err:
                log.warning("GPU %s: quit failed: %s", daemon.control.uuid, err)
            daemon.ready = False
            daemon.last_error = "cgpu mps-daemon stopped"
            self._publish(daemon)
            self._compute_mode(
                daemon.control.uuid, DEFAULT_MODE if self.settings.compute_mode else None
            )
        log.info("stopped %d MPS control daemons", len(self.daemons))
