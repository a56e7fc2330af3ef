"""A stand-in for NVIDIA's `nvidia-cuda-mps-control`, for machines without a GPU.

It behaves as the real program does at its interface:
- `-d` starts the control daemon in the background and returns 0 once it runs; the daemon
  creates its control endpoint (`control`) and `nvidia-cuda-mps-control.pid` in
  $CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps) and logs to `control.log` in
  $CUDA_MPS_LOG_DIRECTORY (default /var/log/nvidia-mps). A second `-d` while one runs fails.
- without `-d` it is the client: each line on stdin is one command sent to the daemon, whose
  answer is printed; with no daemon it fails ("Cannot find MPS control daemon process").
- commands: get/set_default_active_thread_percentage, get/set_default_device_pinned_mem_limit,
  quit; anything else is answered "Unrecognized command".

Every command received is recorded in control.log as `... Command: <text>`, and the start
line records CUDA_VISIBLE_DEVICES, so tests can check what the supervisor sent to which GPU.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from pathlib import Path

PID_NAME = "nvidia-cuda-mps-control.pid"
CONTROL = "control"
PINNED_RE = re.compile(r"^[0-9]+(\.[0-9]+)?[MG]?$")


def pipe_dir() -> Path:
    return Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps")


def log_dir() -> Path:
    return Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY") or "/var/log/nvidia-mps")


def log(text: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with open(log_dir() / "control.log", "a") as out:
        out.write(f"[{stamp} Control {os.getpid()}] {text}\n")


def running() -> int | None:
    """The pid of a live daemon for this pipe directory, if any."""
    try:
        pid = int((pipe_dir() / PID_NAME).read_text())
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else pid  # a killed daemon not yet reaped is gone


class State:
    def __init__(self) -> None:
        self.threads = 100.0
        self.pinned: dict[str, str] = {}

    def handle(self, command: str) -> tuple[str, bool]:
        """(answer, quit)."""
        words = command.split()
        if not words:
            return "", False
        name, args = words[0], words[1:]
        if name == "quit" and not args:
            return "", True
        if name == "get_default_active_thread_percentage" and not args:
            return f"{self.threads:.1f}", False
        if name == "set_default_active_thread_percentage" and len(args) == 1:
            try:
                value = float(args[0])
            except ValueError:
                value = -1.0
            if not 0 < value <= 100:
                return "Invalid active thread percentage", False
            self.threads = value
            return f"{value:.1f}", False
        if name == "set_default_device_pinned_mem_limit" and len(args) == 2:
            if not args[0].isdigit() or not PINNED_RE.match(args[1]):
                return "Invalid device pinned memory limit", False
            self.pinned[args[0]] = args[1]
            return "", False
        if name == "get_default_device_pinned_mem_limit" and len(args) == 1:
            return self.pinned.get(args[0], "0"), False
        return "Unrecognized command", False


def serve(ready_fd: int) -> None:
    """The daemon: answer commands on the control socket until `quit`."""
    directory = pipe_dir()
    path = directory / CONTROL
    path.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(16)
    (directory / PID_NAME).write_text(str(os.getpid()))
    log(
        f"Control daemon started, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}"
    )
    os.write(ready_fd, b"1")
    os.close(ready_fd)
    state = State()
    while True:
        conn, _ = server.accept()
        with conn:
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(4096)
                if not chunk:
                    break
                data += chunk
            command = data.decode(errors="replace").strip()
            log(f"Command: {command}")
            answer, stop = state.handle(command)
            conn.sendall(answer.encode() + b"\n")
        if stop:
            log("Control daemon exiting")
            path.unlink(missing_ok=True)
            (directory / PID_NAME).unlink(missing_ok=True)
            return


def daemonize() -> int:
    """`-d`: fork the daemon away from the caller; return 0 once it listens."""
    pipe_dir().mkdir(parents=True, exist_ok=True)
    log_dir().mkdir(parents=True, exist_ok=True)
    if running() is not None:
        print("An instance of this daemon is already running", file=sys.stderr)
        return 1
    read_fd, write_fd = os.pipe()
    if os.fork() > 0:
        os.close(write_fd)
        ok = os.read(read_fd, 1) == b"1"
        return 0 if ok else 1
    os.close(read_fd)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    try:
        serve(write_fd)
    finally:
        os._exit(0)


def client() -> int:
    """No `-d`: send each stdin line to the daemon and print the answers."""
    for line in sys.stdin.read().splitlines():
        if not line.strip():
            continue
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(5)
                conn.connect(str(pipe_dir() / CONTROL))
                conn.sendall(line.strip().encode() + b"\n")
                answer = b""
                while chunk := conn.recv(4096):
                    answer += chunk
        except OSError:
            print("Cannot find MPS control daemon process", file=sys.stderr)
            return 1
        text = answer.decode(errors="replace").strip()
        if text:
            print(text)
    return 0


def main(argv: list[str]) -> int:
    if argv == ["-d"]:
        return daemonize()
    if not argv:
        return client()
    print(f"usage: nvidia-cuda-mps-control [-d] (got {argv})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
