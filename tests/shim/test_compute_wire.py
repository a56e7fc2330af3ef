"""What the shim says on its arbiter connection, read by a peer written from the wire format.

The peer binds the container's compute.sock itself and plays the arbiter: GRANT, REVOKE, and
reads each message the real shim (in compute_load, on the simulator) sends back.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest
from compute_kit import build_load

from cgpu.core.config import write_config

MSG = struct.Struct("<IIQQ40s")
HELLO, DEV, WANT, DONE, IDLE, BUSY, SPENT = 1, 2, 3, 4, 5, 6, 7
GRANT, REVOKE = 10, 11
BUDGET = struct.Struct("<QII")  # work (ns), busy processes, the arbiter's features
DONE_WANTS = 1  # the feature: a DONE's b = 1 is a WANT
COUNTED = 2  # this grant's budget is counted however many launches it admits
UUID = "GPU-5eed0000-0000-4000-8000-000000000000"  # the simulator's first GPU
MS = 1_000_000


@pytest.fixture(scope="module")
def load(tmp_path_factory: pytest.TempPathFactory, cc: str, sim_dir: Path) -> Path:
    return build_load(cc, sim_dir, tmp_path_factory.mktemp("compute_load"))


class Peer:
    """The arbiter's side of one process's connection."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.conn.settimeout(10)

    def read(self) -> tuple[int, int, int, int]:
        kind, dev, a, b, _text = MSG.unpack(self.conn.recv(64))
        return kind, dev, a, b

    def send(self, kind: int, a: int = 0, b: int = 0, text: bytes = b"") -> None:
        self.conn.send(MSG.pack(kind, 0, a, b, text))

    def until(self, kind: int) -> list[tuple[int, int, int, int]]:
        """The messages up to and including the first of `kind`."""
        seen = []
        while not seen or seen[-1][0] != kind:
            seen.append(self.read())
        return seen


def _start(
    shim_env, load: Path, root: Path, seconds: float, idle_first: float
) -> tuple[socket.socket, subprocess.Popen[bytes]]:
    """A container directory with a `share` 50 line, this peer listening on its compute.sock,
    and one compute_load process of 1 ms kernels in it (idle `idle_first` s, then launching)."""
    ledger = root / "c"
    write_config(ledger, {UUID: 8 << 30}, {UUID: (50, "share")})
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(ledger / "compute.sock"))
    listener.listen(4)
    listener.settimeout(20)
    env = shim_env(devices=1)
    env.update(CGPU_LEDGER_DIR=str(ledger), CGPU_SIM_STATE=str(root / "sim.state"))
    env["CUDA_VISIBLE_DEVICES"] = "0"
    args = [str(load), "run", "kernel", str(MS), str(seconds), "1", str(idle_first), "0"]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return listener, proc


def _greeted(listener: socket.socket) -> Peer:
    """The process's connection, past its HELLO and its DEV for GPU 0."""
    conn, _ = listener.accept()
    peer = Peer(conn)
    assert peer.read()[0] == HELLO
    assert peer.read()[:2] == (DEV, 0)
    return peer


@pytest.mark.parametrize("features", [DONE_WANTS, 0], ids=["arbiter-reads-done", "older-arbiter"])
def test_a_process_that_drains_asks_again_in_its_done_not_in_a_want(
    features, shim_env, sim_dir, load, tmp_path
):
    # A busy process is revoked: its launcher blocks while the work drains. Its DONE says a
    # thread waits (b = 1), and no WANT comes between the REVOKE and the DONE: one message for
    # the arbiter to wake for. An arbiter whose GRANT does not say it reads a DONE so (an older
    # one) gets the WANT, as before, and a DONE with b = 0.
    # 1 ms kernels for 3 s, after 0.2 s holding a context and launching nothing
    listener, proc = _start(shim_env, load, tmp_path, seconds=3.0, idle_first=0.2)
    try:
        peer = _greeted(listener)
        peer.until(WANT)
        budget = BUDGET.pack(0, 1, features)
        for epoch in (1, 2, 3):
            peer.send(GRANT, a=epoch, b=5000, text=budget)
            time.sleep(0.05)  # it launches
            peer.send(REVOKE, a=epoch)
            said = peer.until(DONE)
            kinds = [m[0] for m in said]
            assert said[-1][2] == epoch, said
            if features:
                assert WANT not in kinds and said[-1][3] == 1, said
            else:
                assert WANT in kinds and said[-1][3] == 0, said
        assert proc.poll() is None  # it waits for the next GRANT
    finally:
        proc.kill()
        proc.wait()
        listener.close()


def test_a_done_with_no_launcher_waiting_says_so(shim_env, sim_dir, load, tmp_path):
    # A process that holds a context and launches nothing: granted, then revoked, its DONE
    # says nobody waits (b = 0), and a later launch asks with a WANT of its own.
    # idle for 1.5 s with a context, then 1 ms kernels for 0.5 s
    listener, proc = _start(shim_env, load, tmp_path, seconds=2.0, idle_first=1.5)
    try:
        peer = _greeted(listener)
        time.sleep(0.3)
        peer.send(GRANT, a=1, b=5000, text=BUDGET.pack(0, 1, DONE_WANTS))
        peer.send(REVOKE, a=1)
        said = peer.until(DONE)
        assert said[-1][2:] == (1, 0), said
        asked = peer.until(WANT)  # its launches, after 1.5 s
        assert all(m[0] in (WANT, IDLE, BUSY) for m in asked), asked
    finally:
        proc.kill()
        proc.wait()
        listener.close()


def test_a_counted_grant_of_many_launches_is_spent_and_an_uncounted_one_is_not(
    shim_env, sim_dir, load, tmp_path
):
    # A process alone counts a budget of a few launches only: a grant of 40 ms of 1 ms kernels
    # runs until its REVOKE (its queue is the driver's). Beside a `high` container the arbiter
    # says GRANT_COUNTED: the same grant then ends in a SPENT once 40 ms is admitted, and its
    # gate stays closed, so what a REVOKE must drain is what the arbiter admitted.
    listener, proc = _start(shim_env, load, tmp_path, seconds=5.0, idle_first=0.2)
    try:
        peer = _greeted(listener)
        peer.until(WANT)
        peer.send(GRANT, a=1, b=5000, text=BUDGET.pack(0, 1, DONE_WANTS))  # a turn, measured
        time.sleep(0.1)
        peer.send(REVOKE, a=1)
        peer.until(DONE)
        peer.send(GRANT, a=2, b=5000, text=BUDGET.pack(40 * MS, 1, DONE_WANTS))
        time.sleep(0.2)  # five grants' worth of its kernels
        peer.send(REVOKE, a=2)
        said = peer.until(DONE)
        assert SPENT not in [m[0] for m in said], said
        peer.send(GRANT, a=3, b=5000, text=BUDGET.pack(40 * MS, 1, DONE_WANTS | COUNTED))
        started = time.monotonic()
        said = peer.until(SPENT)
        took = time.monotonic() - started
        assert said[-1][2] == 3 and 0 < said[-1][3] <= 45 * MS, said
        assert took < 1.0, took  # about the grant's 40 ms, on a loaded host
        peer.conn.settimeout(0.1)
        after, until = [], time.monotonic() + 0.5
        while time.monotonic() < until:  # its launcher waits for the next grant, asking
            with contextlib.suppress(TimeoutError):
                after.append(peer.read())
        assert all(m[0] == WANT for m in after), after
        peer.conn.settimeout(10)
        peer.send(REVOKE, a=3)
        assert peer.until(DONE)[-1][2] == 3
    finally:
        proc.kill()
        proc.wait()
        listener.close()
