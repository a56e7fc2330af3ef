"""Helpers for the arbiter's socket tests: container directories, a running `cgpu
compute-arbiter`, and a fake client that speaks the protocol as the shim does."""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cgpu.compute import protocol
from cgpu.core.config import write_config

UUID = "GPU-5eed0000-0000-4000-8000-000000000000"
OTHER = "GPU-5eed0000-0000-4000-8000-000000000001"
GIB = 1 << 30


def make_container(root: Path, name: str, compute: dict[str, tuple[int, str]]) -> Path:
    """A container directory with a cgpu.conf: a slice of both GPUs, `compute` lines."""
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    write_config(directory, {UUID: GIB, OTHER: GIB}, compute)
    return directory


def wait_until(check: Callable[[], Any], timeout: float = 5.0, what: str = "") -> Any:
    """Poll `check` until it returns something true; its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what or check}"
        time.sleep(0.01)


class ArbiterProcess:
    """`cgpu compute-arbiter` over `root`, in its own process."""

    def __init__(
        self, root: Path, *args: str, nofile: int | None = None, log: str = "arbiter.log"
    ) -> None:
        """`nofile`: the arbiter's RLIMIT_NOFILE, soft and hard; `log`: its log's file name
        (beside the root), for an arbiter started again over the same root."""
        self.root = root
        self.status = root.parent / "status.json"
        self.log = root.parent / log
        root.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "cgpu.cli", "compute-arbiter", "--containers", str(root)]
        command += ["--status", str(self.status), "--no-nvml", "--log-level", "DEBUG", *args]

        def limit_files() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=out, preexec_fn=limit_files
            )

    def wait_for_socket(self, directory: Path) -> Path:
        path = directory / "compute.sock"
        wait_until(lambda: path.exists() or self._died(), what=f"{path}")
        return path

    def _died(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()[-3000:]
        return False

    def read_status(self) -> dict[str, Any]:
        return json.loads(self.status.read_text())

    def wait_status(self, check: Callable[[dict[str, Any]], Any], timeout: float = 5.0) -> Any:
        """The first status for which `check` is true (the file is rewritten every second)."""

        def current() -> Any:
            self._died()
            if not self.status.exists():
                return None
            status = self.read_status()
            return status if check(status) else None

        return wait_until(current, timeout, "a status that passes the check")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


def connect(directory: Path) -> socket.socket:
    """A connection to the container's socket (through the directory's descriptor, so a long
    temporary path never meets the 108-byte limit)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(f"/proc/self/fd/{fd}/compute.sock")
    except OSError:
        sock.close()
        raise
    finally:
        os.close(fd)
    return sock


class Client:
    """One process of a container, as the shim's client side would speak."""

    def __init__(self, directory: Path) -> None:
        self.sock = connect(directory)

    def send(self, kind: int, dev: int = 0, a: int = 0, b: int = 0, text: bytes = b"") -> None:
        self.sock.send(protocol.pack(protocol.Message(kind, dev, a, b, text)))

    def hello(self, *devs: tuple[int, str]) -> Client:
        self.send(protocol.HELLO, a=protocol.VERSION, b=os.getpid())
        for index, uuid in devs:
            self.send(protocol.DEV, index, text=uuid.encode())
        return self

    def recv(self, timeout: float = 2.0) -> protocol.Message:
        """The next message from the arbiter; AssertionError on a timeout or a closed socket."""
        self.sock.settimeout(timeout)
        try:
            packet = self.sock.recv(protocol.SIZE + 1)
        except TimeoutError:
            raise AssertionError("no message from the arbiter") from None
        assert len(packet) == protocol.SIZE, f"closed, or a packet of {len(packet)} bytes"
        return protocol.Message(*protocol.FORMAT.unpack(packet))

    def expect(self, kind: int, timeout: float = 2.0) -> protocol.Message:
        message = self.recv(timeout)
        assert message.type == kind, message
        return message

    def silent(self, seconds: float) -> bool:
        """Whether nothing arrives (and the socket stays open) for `seconds`."""
        self.sock.settimeout(seconds)
        try:
            self.sock.recv(protocol.SIZE + 1)
        except TimeoutError:
            return True
        return False

    def closed_by_arbiter(self, timeout: float = 2.0) -> bool:
        """Whether the arbiter closed this connection (possibly after messages for it)."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(protocol.SIZE + 1):
                pass
        except TimeoutError:
            return False
        except ConnectionResetError:
            pass
        return True

    def close(self) -> None:
        self.sock.close()

    def saturate(self, dev: int, stop: threading.Event) -> int:
        """Always want the GPU: answer each REVOKE with DONE and ask again, until `stop`;
        returns the number of grants."""
        grants = 0
        self.send(protocol.WANT, dev)
        while not stop.is_set():
            message = self.recv(timeout=5.0)
            if message.type == protocol.GRANT:
                grants += 1
            elif message.type == protocol.REVOKE:
                self.send(protocol.DONE, dev, a=message.a)
                self.send(protocol.WANT, dev)
        return grants


# A client in a process of its own: it asks for the GPU, says "granted" once it holds it, and
# then answers nothing (so that the test can stop or kill it while it holds the GPU).
HOLDER = """
import os, socket, struct, sys, time
fmt = struct.Struct("<IIQQ40s")
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(f"/proc/self/fd/{fd}/compute.sock")
s.send(fmt.pack(1, 0, 1, os.getpid(), b""))
s.send(fmt.pack(2, 0, 0, 0, sys.argv[2].encode()))
s.send(fmt.pack(3, 0, 0, 0, b""))
while fmt.unpack(s.recv(64))[0] != 10:
    pass
print("granted", flush=True)
time.sleep(60)
"""


def start_holder(directory: Path, uuid: str = UUID) -> subprocess.Popen[str]:
    """A holder process (HOLDER), once the arbiter has granted it the GPU."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory), uuid], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 5.0)
    if not ready or proc.stdout.readline().strip() != "granted":
        proc.kill()
        proc.wait()
        raise AssertionError("the holder process was not granted the GPU")
    return proc


def process_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]
