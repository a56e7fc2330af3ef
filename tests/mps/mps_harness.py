"""Running `cgpu mps-daemon` against the stand-in `nvidia-cuda-mps-control`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STAND_IN = Path(__file__).resolve().with_name("fake_mps_control.py")


def install_stand_in(bin_dir: Path) -> Path:
    """Put the stand-in on a PATH directory as `nvidia-cuda-mps-control`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "nvidia-cuda-mps-control"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STAND_IN}" "$@"\n')
    exe.chmod(0o755)
    return exe


def path_env(bin_dir: Path) -> dict[str, str]:
    """This environment with `bin_dir` first on PATH."""
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}


@dataclass
class MpsDaemon:
    """A running `cgpu mps-daemon` and the files it keeps under `root`."""

    proc: subprocess.Popen[bytes]
    root: Path
    log_path: Path
    uuids: list[str]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self, uuid: str) -> dict[str, Any]:
        return json.loads((self.root / uuid / "health.json").read_text())

    def wait_state(self, uuid: str, state: str, timeout: float = 15.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                body = self.health(uuid)
                if body["state"] == state:
                    return body
            except (OSError, ValueError):
                pass
            assert self.proc.poll() is None, f"cgpu mps-daemon exited:\n{self.log()}"
            assert time.monotonic() < deadline, f"{uuid} not {state}:\n{self.log()}"
            time.sleep(0.05)

    def control_log(self, uuid: str) -> str:
        path = self.root / uuid / "log" / "control.log"
        return path.read_text() if path.exists() else ""

    def daemon_pid(self, uuid: str) -> int:
        return int((self.root / uuid / "pipe" / "nvidia-cuda-mps-control.pid").read_text())

    def kill_daemon(self, uuid: str) -> int:
        """SIGKILL the GPU's control daemon (the stand-in we started); returns its pid."""
        pid = self.daemon_pid(uuid)
        os.kill(pid, signal.SIGKILL)
        return pid

    def stop(self) -> int:
        """SIGTERM, and the exit status; kills what is left of the daemons we started."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for uuid in self.uuids:
            with contextlib.suppress(OSError, ValueError):
                os.kill(self.daemon_pid(uuid), signal.SIGKILL)
        return self.proc.returncode


def start_mps_daemon(root: Path, bin_dir: Path, uuids: list[str], *extra: str) -> MpsDaemon:
    """Start `cgpu mps-daemon` for `uuids` with the stand-in on PATH; waits for every GPU."""
    install_stand_in(bin_dir)
    log_path = root.parent / f"{root.name}-mps-daemon.log"
    command = [
        sys.executable, "-m", "cgpu.cli", "mps-daemon",
        "--root", str(root),
        *[arg for uuid in uuids for arg in ("--gpu", uuid)],
        "--compute-mode", "none",
        "--interval", "0.2",
        "--restart-delay", "1.5",
        *extra,
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            command, env=path_env(bin_dir), stdout=log, stderr=subprocess.STDOUT
        )
    daemon = MpsDaemon(proc, root, log_path, list(uuids))
    try:
        for uuid in uuids:
            daemon.wait_state(uuid, "ready")
    except AssertionError:
        daemon.stop()
        raise
    return daemon
