"""`cgpu compute-arbiter` over real unix sockets, with fake clients that speak the protocol.

Containers are directories with a cgpu.conf written here; the arbiter runs as its own process
(and, for the NVML estimator, as a thread with a fake NVML).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from arbiter_kit import (
    GIB,
    OTHER,
    UUID,
    ArbiterProcess,
    Client,
    make_container,
    process_state,
    start_holder,
    wait_until,
)

from cgpu.compute import protocol
from cgpu.compute.arbiter import Arbiter, ArbiterConfig
from cgpu.core.config import write_config

GRANT, REVOKE, REFUSE = protocol.GRANT, protocol.REVOKE, protocol.REFUSE
HELLO, DEV, WANT, DONE = protocol.HELLO, protocol.DEV, protocol.WANT, protocol.DONE


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "containers"


@pytest.fixture
def start(root: Path):
    started: list[ArbiterProcess] = []

    def make(*args: str) -> ArbiterProcess:
        arbiter = ArbiterProcess(root, *args)
        started.append(arbiter)
        return arbiter

    yield make
    for arbiter in started:
        arbiter.stop()


def _pair(root: Path, start, *args: str) -> tuple[ArbiterProcess, Path, Path]:
    """An arbiter over two share 50 containers, a and b, with their sockets up."""
    a_dir = make_container(root, "a", {UUID: (50, "share")})
    b_dir = make_container(root, "b", {UUID: (50, "share")})
    arbiter = start(*args)
    arbiter.wait_for_socket(a_dir)
    arbiter.wait_for_socket(b_dir)
    return arbiter, a_dir, b_dir


def test_two_containers_take_turns_by_grant_revoke_and_done(root: Path, start) -> None:
    _, a_dir, b_dir = _pair(root, start, "--quantum-ms", "50")
    assert (a_dir / "compute.sock").stat().st_mode & 0o777 == 0o666
    a = Client(a_dir).hello((3, UUID))
    b = Client(b_dir).hello((0, UUID))
    a.send(WANT, 3)
    first = a.expect(GRANT)
    assert first.dev == 3  # the client's own index of the GPU
    asked = time.monotonic()
    b.send(WANT, 0)
    revoke = a.expect(REVOKE)
    assert time.monotonic() - asked >= 0.040  # a keeps the GPU for its quantum
    assert (revoke.dev, revoke.a) == (3, first.a)
    assert b.silent(0.05)  # nothing for b until a has drained
    a.send(DONE, 3, a=revoke.a)
    second = b.expect(GRANT)
    assert second.dev == 0 and second.a > first.a
    a.send(WANT, 3)
    back = b.expect(REVOKE)
    assert back.a == second.a
    b.send(DONE, 0, a=back.a)
    assert a.expect(GRANT).a > second.a


def test_a_done_that_says_a_thread_waits_is_its_want(root: Path, start) -> None:
    # The shim's threads that block while it drains are asked for by its DONE (b = 1): one
    # message for the arbiter to wake for, not a WANT and a DONE.
    _, a_dir, b_dir = _pair(root, start, "--quantum-ms", "50")
    a = Client(a_dir).hello((0, UUID))
    b = Client(b_dir).hello((0, UUID))
    a.send(WANT, 0)
    first = a.expect(GRANT)
    b.send(WANT, 0)
    revoke = a.expect(REVOKE)
    a.send(DONE, 0, a=revoke.a, b=1)
    second = b.expect(GRANT)
    assert b.expect(REVOKE).a == second.a  # a waits: b's turn ends at its quantum
    b.send(DONE, 0, a=second.a)
    assert a.expect(GRANT).a > second.a > first.a
    # Without it (b = 0), nobody waits: b keeps the GPU past its quantum.
    b.send(WANT, 0)
    third = a.expect(REVOKE)
    a.send(DONE, 0, a=third.a)
    b.expect(GRANT)
    assert b.silent(0.2)


def test_a_stopped_holder_is_passed_over_at_once(root: Path, start) -> None:
    arbiter, a_dir, b_dir = _pair(root, start, "--drain-cap-ms", "5000")
    holder = start_holder(a_dir)
    try:
        os.kill(holder.pid, signal.SIGSTOP)
        wait_until(lambda: process_state(holder.pid) == "T", what="the holder to stop")
        b = Client(b_dir).hello((0, UUID))
        asked = time.monotonic()
        b.send(WANT, 0)
        b.expect(GRANT)
        assert time.monotonic() - asked < 0.3  # not the 5 s drain cap
        status = arbiter.wait_status(lambda s: s["gpus"][UUID]["holder"] == str(b_dir))
        assert status["gpus"][UUID]["containers"][str(a_dir)]["forced_revokes"] == 0
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holder_hands_the_gpu_over_at_once(root: Path, start) -> None:
    # a quantum of 200 ms: the revoke's deadline (two quanta) is 0.4 s after the quantum's end
    _, a_dir, b_dir = _pair(root, start, "--drain-cap-ms", "5000", "--quantum-ms", "200")
    holder = start_holder(a_dir)
    b = Client(b_dir).hello((0, UUID))
    b.send(WANT, 0)
    assert b.silent(0.3)  # revoked, but the holder does not answer
    killed = time.monotonic()
    holder.kill()
    holder.wait()
    b.expect(GRANT)
    assert time.monotonic() - killed < 0.3


GARBAGE: dict[str, list[bytes]] = {
    "short packet": [b"\x01\x00\x00\x00"],
    "long packet": [protocol.pack(protocol.Message(HELLO, a=1)) + b"\x00"],
    "unknown type": [protocol.pack(protocol.Message(99))],
    "an arbiter's type": [protocol.pack(protocol.Message(GRANT))],
    "no HELLO first": [protocol.pack(protocol.Message(WANT))],
    "another version": [protocol.pack(protocol.Message(HELLO, a=2))],
    "HELLO twice": [protocol.pack(protocol.Message(HELLO, a=1))] * 2,
    "device out of range": [
        protocol.pack(protocol.Message(HELLO, a=1)),
        protocol.pack(protocol.Message(DEV, 16, text=UUID.encode())),
    ],
    "DEV twice": [
        protocol.pack(protocol.Message(HELLO, a=1)),
        protocol.pack(protocol.Message(DEV, 0, text=UUID.encode())),
        protocol.pack(protocol.Message(DEV, 1, text=UUID.encode())),
    ],
    "not a UUID": [
        protocol.pack(protocol.Message(HELLO, a=1)),
        protocol.pack(protocol.Message(DEV, 0, text=b"GPU/../etc")),
    ],
    "not ASCII": [
        protocol.pack(protocol.Message(HELLO, a=1)),
        protocol.pack(protocol.Message(DEV, 0, text=b"GPU-\xff")),
    ],
    "undeclared device": [
        protocol.pack(protocol.Message(HELLO, a=1)),
        protocol.pack(protocol.Message(WANT, 5)),
    ],
}


def test_garbage_closes_only_its_connection(root: Path, start) -> None:
    arbiter, a_dir, b_dir = _pair(root, start)
    a = Client(a_dir).hello((0, UUID))
    a.send(WANT, 0)
    grant = a.expect(GRANT)
    for case, packets in GARBAGE.items():
        bad = Client(a_dir)
        for packet in packets:
            bad.sock.send(packet)
        assert bad.closed_by_arbiter(), case
        bad.close()
    status = arbiter.wait_status(lambda s: s["bad_messages"] == len(GARBAGE))
    assert status["bad_configs"] == 0
    # the good connections are served as before: a still holds, and hands over to b
    b = Client(b_dir).hello((0, UUID))
    b.send(WANT, 0)
    revoke = a.expect(REVOKE)
    assert revoke.a == grant.a
    a.send(DONE, 0, a=revoke.a)
    b.expect(GRANT)


def test_done_for_another_epoch_is_ignored_and_keeps_the_connection(root: Path, start) -> None:
    arbiter, a_dir, b_dir = _pair(root, start, "--quantum-ms", "200")  # a 0.4 s deadline
    a = Client(a_dir).hello((0, UUID))
    b = Client(b_dir).hello((0, UUID))
    a.send(WANT, 0)
    a.expect(GRANT)
    b.send(WANT, 0)
    revoke = a.expect(REVOKE)
    a.send(DONE, 0, a=revoke.a + 7)
    assert b.silent(0.1) and a.silent(0.01)
    a.send(DONE, 0, a=revoke.a)
    b.expect(GRANT)
    assert arbiter.read_status()["bad_messages"] == 0


def test_sockets_go_to_the_containers_of_gated_gpus(root: Path, start) -> None:
    """A GPU where some container has a compute line is gated: every container on it gets a
    socket (those without a line as best effort); a container on no gated GPU gets none."""
    limited = make_container(root, "limited", {UUID: (30, "fixed")})
    plain = make_container(root, "plain", {})
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    write_config(elsewhere, {"GPU-99999999-9999-9999-9999-999999999999": GIB}, {})
    broken = root / "broken"
    broken.mkdir()
    (broken / "cgpu.conf").write_text("version 1\ncompute nonsense\n")
    empty = root / "empty"
    empty.mkdir()
    arbiter = start()
    arbiter.wait_for_socket(limited)
    arbiter.wait_for_socket(plain)
    status = arbiter.wait_status(lambda s: s["bad_configs"] >= 1)
    assert not (elsewhere / "compute.sock").exists()
    assert not (broken / "compute.sock").exists()
    assert not (empty / "compute.sock").exists()
    containers = status["gpus"][UUID]["containers"]
    assert sorted(containers) == sorted([str(limited), str(plain)])
    assert containers[str(plain)]["policy"] == "best-effort"
    assert containers[str(plain)]["limit"] == 0
    assert OTHER not in status["gpus"]  # nobody limits it: nobody takes turns there
    time.sleep(1.1)  # two more scans: a malformed file is counted once, not at every scan
    assert arbiter.read_status()["bad_configs"] == 1


def test_a_gpu_without_a_compute_line_is_refused(root: Path, start) -> None:
    directory = make_container(root, "a", {UUID: (30, "share")})
    arbiter = start()
    arbiter.wait_for_socket(directory)
    client = Client(directory).hello((1, OTHER))
    refuse = client.expect(REFUSE)
    assert refuse.dev == 1 and refuse.text.strip(b"\0")
    client.send(DEV, 0, text=UUID.encode())  # the connection goes on
    client.send(WANT, 0)
    assert client.expect(GRANT).dev == 0


def test_the_status_file_reports_limits_shares_and_charges(root: Path, start) -> None:
    a_dir = make_container(root, "a", {UUID: (30, "fixed"), OTHER: (40, "share")})
    b_dir = make_container(root, "b", {UUID: (70, "share")})
    arbiter = start()
    arbiter.wait_for_socket(a_dir)
    arbiter.wait_for_socket(b_dir)
    client = Client(a_dir).hello((0, UUID))
    stop = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        began = time.monotonic()
        grants = pool.submit(client.saturate, 0, stop)
        time.sleep(1.5)
        status = arbiter.wait_status(lambda s: s["time"] > time.time() - 0.2)
        elapsed = time.monotonic() - began
        stop.set()
    gpu = status["gpus"][UUID]
    a = gpu["containers"][str(a_dir)]
    assert (a["limit"], a["policy"], a["forced_revokes"]) == (30, "fixed", 0)
    assert a["share_percent"] == pytest.approx(30, abs=4)  # over the last second
    assert a["charged_ns"] == pytest.approx(0.3e9 * elapsed + 20e6, abs=60e6)  # + a quantum
    assert gpu["epoch"] > 10 and grants.result() > 10  # a fixed 30 holds in slices
    assert gpu["containers"][str(b_dir)] == {
        "limit": 70,
        "policy": "share",
        "priority": "normal",
        "share_percent": 0,
        "charged_ns": 0,
        "forced_revokes": 0,
        "host_percent": 0.0,
        "out_of_turn_s": 0.0,
        "over_compute": False,
    }
    assert gpu["host_view"] is False  # --no-nvml: the host figures say nothing
    assert status["gpus"][OTHER]["containers"][str(a_dir)]["policy"] == "share"
    assert (status["bad_messages"], status["bad_configs"]) == (0, 0)


def test_containers_come_go_and_change_their_limits(root: Path, start) -> None:
    root.mkdir(parents=True)
    arbiter = start()
    directory = make_container(root, "late", {UUID: (30, "share")})
    arbiter.wait_for_socket(directory)
    client = Client(directory).hello((0, UUID))
    client.send(WANT, 0)
    client.expect(GRANT)
    write_config(directory, {UUID: 1 << 30}, {UUID: (60, "fixed")})

    def limit(status: dict) -> object:
        return status["gpus"][UUID]["containers"][str(directory)]["limit"]

    arbiter.wait_status(lambda s: limit(s) == 60)
    (directory / "compute.sock").unlink()  # the container removes its socket: a new one comes
    arbiter.wait_for_socket(directory)
    assert Client(directory).hello((1, OTHER)).expect(REFUSE).dev == 1  # the new one serves
    client.expect(REVOKE)  # and the old connection still is: a fixed 60 spends its budget
    write_config(directory, {UUID: 1 << 30})  # the compute line goes
    assert client.closed_by_arbiter(timeout=3)
    wait_until(lambda: not (directory / "compute.sock").exists(), what="the socket to go")
    arbiter.wait_status(lambda s: UUID not in s["gpus"])
    write_config(directory, {UUID: 1 << 30}, {UUID: (30, "share")})  # back again
    arbiter.wait_for_socket(directory)
    shutil.rmtree(directory)  # the container ends
    arbiter.wait_status(lambda s: UUID not in s["gpus"])


def test_sigterm_closes_everything_and_exits_0(root: Path, start) -> None:
    arbiter, a_dir, b_dir = _pair(root, start)
    client = Client(a_dir).hello((0, UUID))
    client.send(WANT, 0)
    client.expect(GRANT)
    assert arbiter.stop() == 0
    assert client.closed_by_arbiter()
    assert not (a_dir / "compute.sock").exists() and not (b_dir / "compute.sock").exists()


class FakeNvml:
    """NVML as the estimator reads it: the test's own process (a managed client) and one
    stranger on the GPU, and a GPU 100% busy in 100 ms sample periods."""

    PERIOD_US = 100_000

    def running_pids(self, uuid: str) -> set[int]:
        return {os.getpid(), 4_000_000}

    def busy_samples(self, uuid: str, after_us: int) -> list[tuple[int, int]]:
        now = time.time_ns() // 1000
        last = now - now % self.PERIOD_US
        first = max(after_us + 1, last - 10 * self.PERIOD_US)
        return [(end, 100) for end in range(last, first - 1, -self.PERIOD_US)][::-1]


def test_the_unmanaged_load_counts_only_processes_outside_the_containers(root: Path) -> None:
    directory = make_container(root, "a", {UUID: (30, "fixed")})
    status_path = root.parent / "status.json"
    arbiter = Arbiter(ArbiterConfig(roots=(root,), status=status_path), busy_source=FakeNvml())
    thread = threading.Thread(target=arbiter.run)
    thread.start()
    try:
        wait_until(lambda: (directory / "compute.sock").exists(), what="the socket")
        client = Client(directory).hello((0, UUID))  # on the GPU, not asking: nothing is held

        def load() -> float:
            if not status_path.exists():
                return 0.0
            return json.loads(status_path.read_text())["gpus"][UUID]["unmanaged_load"]

        # u is 1 (busy, never held); k is 1 once the client has said hello: its process is no
        # stranger (before that it counts, and the load is 2)
        wait_until(lambda: 0.75 <= load() <= 1.0, timeout=6, what="the unmanaged load")
        time.sleep(1.2)  # a status or two later
        assert 0.75 <= load() <= 1.0
        client.close()
    finally:
        arbiter.stop()
        thread.join(timeout=5)
    assert not thread.is_alive()
    assert not (directory / "compute.sock").exists()


def test_idle_containers_trade_snapshots_with_the_nvml_thread_twice_a_second(root: Path) -> None:
    """While no GPU has a holder or a waiter, the loop trades snapshots with the NVML thread
    every 0.5 s, not every 0.1 s (16 idle containers cost 0.6% of a core, the goal 0.5%); a WANT
    brings the 0.1 s back at once."""
    directory = make_container(root, "a", {UUID: (30, "share")})
    arbiter = Arbiter(ArbiterConfig(roots=(root,)), busy_source=FakeNvml())
    published: list[float] = []
    publish = arbiter._sampler.publish

    def counted(snapshot) -> None:
        published.append(time.monotonic())
        publish(snapshot)

    arbiter._sampler.publish = counted  # type: ignore[method-assign]
    thread = threading.Thread(target=arbiter.run)
    thread.start()
    try:
        wait_until(lambda: (directory / "compute.sock").exists(), what="the socket")
        client = Client(directory).hello((0, UUID))  # connected, asking for nothing
        time.sleep(0.6)
        start = len(published)
        time.sleep(2.0)
        assert len(published) - start <= 6, published  # every 0.5 s (20 at 0.1 s)
        client.send(WANT, 0)
        client.expect(GRANT)
        start = len(published)
        time.sleep(1.0)
        assert len(published) - start >= 7, published  # every 0.1 s while it holds
        client.close()
    finally:
        arbiter.stop()
        thread.join(timeout=5)
    assert not thread.is_alive()


@pytest.mark.parametrize("option", ["--quantum-ms=0", "--drain-cap-ms=-1", "--idle-release-ms=-1"])
def test_bad_options_are_refused(option: str, root: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cgpu.cli", "compute-arbiter", "--containers", str(root), option],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "must be" in done.stderr


def test_best_effort_takes_turns_and_is_refused_once_nobody_limits_the_gpu(root: Path, start):
    """A container without a limit, beside one with a limit, waits for its turn as best effort:
    the limited one, with credit, goes first. When the limited one goes, that GPU is no longer
    gated: the best-effort connection is REFUSEd there (its gate opens at once), not closed
    (it is still best effort on the other GPU, which a third container limits), and what it
    sent before reading the REFUSE is no offence. A GPU nobody limits is REFUSEd from the
    start."""
    limited = make_container(root, "limited", {UUID: (50, "fixed")})
    (root / "third").mkdir()
    write_config(root / "third", {OTHER: GIB}, {OTHER: (10, "fixed")})
    plain = root / "plain"
    plain.mkdir()
    write_config(
        plain, {UUID: GIB, OTHER: GIB, "GPU-99999999-9999-9999-9999-999999999999": GIB}, {}
    )
    arbiter = start()
    for directory in (limited, root / "third", plain):
        arbiter.wait_for_socket(directory)
    best = Client(plain).hello(
        (0, UUID), (1, OTHER), (2, "GPU-99999999-9999-9999-9999-999999999999")
    )
    assert best.expect(REFUSE).dev == 2  # nobody limits it: not gated there
    lim = Client(limited).hello((0, UUID))
    lim.send(WANT, 0)
    lim.expect(GRANT)
    best.send(WANT, 0)
    assert best.silent(0.05)  # the limited one holds; best effort waits
    shutil.rmtree(limited)
    message = best.recv(3.0)
    while message.type != REFUSE:  # the GPU may be granted before the scan that ungates it
        message = best.recv(3.0)
    assert message.dev == 0
    best.send(WANT, 0)  # crossed the REFUSE: ignored
    best.send(WANT, 1)
    assert best.expect(GRANT).dev == 1  # still best effort on OTHER
    assert not best.closed_by_arbiter(timeout=0.2)
    status = arbiter.wait_status(lambda s: UUID not in s["gpus"])
    assert status["bad_messages"] == 0
