"""Clients of `cgpu compute-arbiter` written from the wire format alone (docs/architecture.md,
"Protocol"): well-behaved saturating containers that record the turns they get, and hostile
ones that flood, send garbage, or go silent while they hold the GPU.

Stdlib only, so each client can run as a process of its own (`python hostile_kit.py ROLE ...`),
with no GIL shared with the test and no code shared with the arbiter or the shim:

    saturate DIR UUID    want the GPU whenever it is not held, answer REVOKE with DONE and
                         reconnect as the shim does (native/shim/token.c); on SIGTERM print the
                         holds, [[grant, revoke], ...] in time.monotonic() seconds, as JSON
    flood UUID DIR...    as many connections as it may to each DIR, flooded with valid and
                         malformed packets, reconnecting as fast as it can; on SIGTERM print
                         its counts as JSON
    hog UUID DIR...      as many connections as it may to each DIR, introduced and then kept
    silent UUID DIR      one connection at a time: HELLO, DEV, WANT, and once granted never
                         read or answer again (the connection stays open; at the cap the oldest
                         is closed)

Shares are judged in 1 s windows by `holds_rule`, the rule tests/shim/test_compute_arbiter.py
uses (every window within TOL but for one late turn, the mean within TOL / 2).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

# The wire format: one packet of struct { u32 type; u32 dev; u64 a; u64 b; char text[40]; },
# little-endian, per SOCK_SEQPACKET packet.
WIRE = struct.Struct("<IIQQ40s")
SIZE = 64
HELLO, DEV, WANT, DONE, IDLE, BUSY, SPENT = 1, 2, 3, 4, 5, 6, 7
GRANT, REVOKE, REFUSE = 10, 11, 12
VERSION = 1
SOCKET = "compute.sock"

# The shim's reconnection (token.c): every 20 ms while the arbiter is away, for 1 s; then the
# NVML controller takes over and looks for the socket every second. WANT again after 50 ms
# unanswered.
RECONNECT_EVERY = 0.020
RECONNECT_FOR = 1.0
FALLBACK_EVERY = 1.0
WANT_AGAIN = 0.050


def packet(kind: int, dev: int = 0, a: int = 0, b: int = 0, text: bytes = b"") -> bytes:
    """One 64-byte packet."""
    return WIRE.pack(kind, dev, a, b, text)


def hello() -> bytes:
    return packet(HELLO, a=VERSION, b=os.getpid())


def dev(index: int, uuid: str) -> bytes:
    return packet(DEV, index, text=uuid.encode())


def connect(directory: Path | str, blocking: bool = True) -> socket.socket:
    """A connection to DIR/compute.sock, through the directory's descriptor (no 108-byte path
    limit). OSError if it cannot be made (no socket, refused, backlog full when non-blocking)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.setblocking(blocking)
        sock.connect(f"/proc/self/fd/{fd}/{SOCKET}")
    except OSError:
        sock.close()
        raise
    finally:
        os.close(fd)
    return sock


def malformed(uuid: str) -> dict[str, list[bytes]]:
    """Every kind of malformed packet, each as the sequence that ends in it: the arbiter must
    close the connection after the last one."""
    ok = [hello(), dev(0, uuid)]
    return {
        "short packet": [b"\x01\x00\x00\x00"],
        "long packet": [hello() + b"\x00"],
        "huge packet": [hello() + b"\x00" * 4000],
        "type 0": [packet(0)],
        "type 8": [*ok, packet(8)],
        "type 99": [*ok, packet(99)],
        "type 2^32-1": [*ok, packet(0xFFFFFFFF)],
        "GRANT from a client": [*ok, packet(GRANT, a=1)],
        "REVOKE from a client": [*ok, packet(REVOKE, a=1)],
        "REFUSE from a client": [*ok, packet(REFUSE)],
        "DEV before HELLO": [dev(0, uuid)],
        "WANT before HELLO": [packet(WANT)],
        "HELLO twice": [hello(), hello()],
        "HELLO version 0": [packet(HELLO, a=0)],
        "HELLO version 2": [packet(HELLO, a=2)],
        "HELLO version 2^64-1": [packet(HELLO, a=(1 << 64) - 1)],
        "DEV index 16": [hello(), dev(16, uuid)],
        "DEV index 2^32-1": [hello(), dev(0xFFFFFFFF, uuid)],
        "WANT index 16": [*ok, packet(WANT, 16)],
        "DEV not ASCII": [hello(), packet(DEV, 0, text=b"GPU-\xff\xfe")],
        "DEV not a UUID": [hello(), packet(DEV, 0, text=b"GPU/../../etc/passwd")],
        "DEV empty": [hello(), packet(DEV, 0)],
        "DEV 40 bytes, no NUL": [hello(), packet(DEV, 0, text=b"G" * 40)],
        "DEV twice, same index": [*ok, dev(0, "GPU-5eed0000-0000-4000-8000-00000000000f")],
        "DEV twice, same GPU": [*ok, dev(1, uuid)],
        "WANT for an undeclared device": [*ok, packet(WANT, 5)],
        "DONE for an undeclared device": [*ok, packet(DONE, 7, a=1)],
        "DONE with b = 2 (b says whether a thread waits: 0 or 1)": [*ok, packet(DONE, a=1, b=2)],
        "IDLE for an undeclared device": [*ok, packet(IDLE, 3)],
        "BUSY for an undeclared device": [*ok, packet(BUSY, 3)],
        "SPENT for an undeclared device": [*ok, packet(SPENT, 3, a=1, b=1)],
    }


def valid_noise(round_: int) -> list[bytes]:
    """Valid packets for device 0 that ask for nothing sane: WANT, IDLE, BUSY, DONE and SPENT
    for epochs that are not the grant's (and a SPENT that claims a huge queue)."""
    epoch = (round_ * 7919) % (1 << 32) + 1_000_000
    return [
        packet(WANT),
        packet(IDLE),
        packet(BUSY),
        packet(DONE, a=epoch),
        packet(SPENT, a=epoch, b=(1 << 64) - 1),
        packet(WANT),
        packet(DONE, a=0),
        packet(SPENT, a=0, b=0),
    ]


# --- judging shares ------------------------------------------------------------------------


def windows(start: float, count: int) -> list[tuple[float, float]]:
    """`count` consecutive 1 s windows from `start`."""
    return [(start + i, start + i + 1.0) for i in range(count)]


def shares(holds: Sequence[Sequence[float]], spans: Sequence[tuple[float, float]]) -> list[float]:
    """The percent of each window that `holds` ([grant, revoke] pairs) cover."""
    got = []
    for begin, end in spans:
        covered = sum(max(0.0, min(end, b) - max(begin, a)) for a, b in holds)
        got.append(round(100.0 * covered / (end - begin), 1))
    return got


def holds_rule(got: Sequence[float], target: float, tol: float, at_least: bool = False) -> str:
    """'' if the windows hold `target`, else why not. Every window within `tol`, but for one
    late turn (a process held up on a loaded machine takes its turn a window late and the next
    pays it back: at most two adjacent windows off, each within 2 tol, together within tol),
    and the mean within tol / 2. `at_least`: only shortfalls count."""

    def miss(value: float) -> float:
        return max(0.0, target - value) if at_least else abs(value - target)

    off = [i for i, v in enumerate(got) if miss(v) > tol]
    late = len(off) <= 2 and all(miss(got[i]) <= 2 * tol for i in off)
    if len(off) == 2:
        late = late and off[1] == off[0] + 1 and miss((got[off[0]] + got[off[1]]) / 2) <= tol
    mean = sum(got) / len(got) if got else 0.0
    if not late:
        return f"windows {list(got)} off {target} by more than {tol} (beyond one late turn)"
    if miss(mean) > tol / 2:
        return f"windows {list(got)}: mean {mean:.1f}, off {target} by more than {tol / 2}"
    return ""


# --- the arbiter's own cost ----------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds (/proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    """VmRSS of a process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# --- the clients, as processes -------------------------------------------------------------


class _Stop:
    """Set by SIGTERM."""

    def __init__(self) -> None:
        self.now = False
        signal.signal(signal.SIGTERM, self._set)

    def _set(self, *_: object) -> None:
        self.now = True


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _reconnect(directory: str, uuid: str, stop: _Stop) -> socket.socket | None:
    """Connect and introduce the process as the shim does: HELLO, DEV, and WANT (its launchers
    wait). Retries every 20 ms for 1 s, then every second (None once stopped)."""
    since = time.monotonic()
    while not stop.now:
        try:
            sock = connect(directory)
            sock.sendall(hello())
            sock.sendall(dev(0, uuid))
            sock.sendall(packet(WANT))
            return sock
        except OSError:
            pass
        late = time.monotonic() - since > RECONNECT_FOR
        time.sleep(FALLBACK_EVERY if late else RECONNECT_EVERY)
    return None


def saturate(directory: str, uuid: str) -> list[list[float]]:
    """A process that always has work: its holds until SIGTERM."""
    stop = _Stop()
    holds: list[list[float]] = []
    granted_at: float | None = None
    sock = _reconnect(directory, uuid, stop)
    wanted = time.monotonic()
    while sock is not None and not stop.now:
        ready, _, _ = select.select([sock], [], [], WANT_AGAIN)
        now = time.monotonic()
        if not ready:
            if granted_at is None and now - wanted >= WANT_AGAIN:
                with contextlib.suppress(OSError):
                    sock.send(packet(WANT))
                wanted = now
            continue
        try:
            data = sock.recv(SIZE + 1)
        except OSError:
            data = b""
        if len(data) != SIZE:  # the arbiter went away: the gate closes, reconnect
            if granted_at is not None:
                holds.append([granted_at, now])
                granted_at = None
            sock.close()
            sock = _reconnect(directory, uuid, stop)
            wanted = time.monotonic()
            continue
        kind, _dev, a, _b, _text = WIRE.unpack(data)
        if kind == GRANT and granted_at is None:
            granted_at = now
        elif kind == REVOKE:
            if granted_at is not None:
                holds.append([granted_at, now])
                granted_at = None
            with contextlib.suppress(OSError):
                sock.send(packet(DONE, a=a))
                sock.send(packet(WANT))
            wanted = now
    if granted_at is not None:
        holds.append([granted_at, time.monotonic()])
    return holds


class _FloodConn:
    """One hostile connection and where it is in its script."""

    def __init__(self, sock: socket.socket, script: list[bytes]) -> None:
        self.sock = sock
        self.script = script
        self.sent = 0


def _open(directory: str) -> socket.socket | None:
    try:
        return connect(directory, blocking=False)
    except OSError:
        return None


def flood(uuid: str, directories: Sequence[str], per_dir: int = 1024) -> dict[str, int]:
    """As many connections to each directory as the arbiter lets it keep (up to `per_dir`),
    each sending valid noise forever or a malformed sequence; a closed one is reopened at once."""
    stop = _Stop()
    _raise_nofile()
    bad = list(malformed(uuid).values())
    conns: dict[str, list[_FloodConn]] = {d: [] for d in directories}
    counts = {"connects": 0, "refused": 0, "closed": 0, "packets": 0, "max_open": 0}
    turn = 0
    while not stop.now:
        turn += 1
        for directory, mine in conns.items():
            for _ in range(64):  # new connections, as many as it may
                if len(mine) >= per_dir:
                    break
                sock = _open(directory)
                if sock is None:
                    counts["refused"] += 1
                    break
                counts["connects"] += 1
                n = counts["connects"]
                script = bad[n % len(bad)] if n % 4 == 0 else [hello(), dev(0, uuid)]
                mine.append(_FloodConn(sock, script))
            counts["max_open"] = max(counts["max_open"], sum(len(c) for c in conns.values()))
            alive = []
            for conn in mine:
                if _flood_one(conn, turn, counts):
                    alive.append(conn)
                else:
                    counts["closed"] += 1
                    conn.sock.close()
            conns[directory] = alive
    for mine in conns.values():
        for conn in mine:
            conn.sock.close()
    return counts


def _flood_one(conn: _FloodConn, turn: int, counts: dict[str, int]) -> bool:
    """Send this connection's next packets; False once the arbiter has closed it."""
    try:
        while True:  # read what the arbiter sent (and see whether it closed us)
            data = conn.sock.recv(SIZE + 1, socket.MSG_DONTWAIT)
            if not data:
                return False
    except BlockingIOError:
        pass
    except OSError:
        return False
    batch = conn.script[conn.sent :] if conn.sent < len(conn.script) else valid_noise(turn)
    for data in batch:
        try:
            conn.sock.send(data, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return True
        except OSError:
            return False
        counts["packets"] += 1
        conn.sent += 1
    return True


def hog(uuid: str, directories: Sequence[str], per_dir: int = 1024) -> dict[str, int]:
    """Connections, as many as it may to each directory, each introduced (HELLO, and DEV for a
    GPU: no WANT) and then kept; a closed one is reopened, every few ms."""
    stop = _Stop()
    _raise_nofile()
    conns: dict[str, list[socket.socket]] = {d: [] for d in directories}
    counts = {"connects": 0, "refused": 0, "closed": 0, "max_open": 0}
    while not stop.now:
        for directory, mine in conns.items():
            alive = []
            for sock in mine:
                try:
                    while sock.recv(SIZE + 1, socket.MSG_DONTWAIT):
                        pass
                    counts["closed"] += 1  # b"": closed by the arbiter
                    sock.close()
                    continue
                except BlockingIOError:
                    alive.append(sock)
                except OSError:
                    counts["closed"] += 1
                    sock.close()
            while len(alive) < per_dir:
                sock = _open(directory)
                if sock is None:
                    counts["refused"] += 1
                    break
                try:
                    sock.send(hello(), socket.MSG_DONTWAIT)
                    sock.send(dev(0, uuid), socket.MSG_DONTWAIT)
                except OSError:
                    pass
                counts["connects"] += 1
                alive.append(sock)
            conns[directory] = alive
        counts["max_open"] = max(counts["max_open"], sum(len(c) for c in conns.values()))
        time.sleep(0.005)
    return counts


def silent(uuid: str, directory: str, cap: int = 1024) -> dict[str, int]:
    """Again and again: a new connection asks for the GPU and, once granted, is never read or
    answered again. At most `cap` are kept (then the oldest is closed)."""
    stop = _Stop()
    _raise_nofile()
    kept: list[socket.socket] = []
    counts = {"grants": 0, "refused": 0}
    while not stop.now:
        try:
            sock = connect(directory)
            sock.settimeout(1.0)
            sock.sendall(hello())
            sock.sendall(dev(0, uuid))
            sock.sendall(packet(WANT))
        except OSError:
            counts["refused"] += 1
            if kept:
                kept.pop(0).close()
            time.sleep(0.05)
            continue
        if _until_granted(sock, stop):
            counts["grants"] += 1
            kept.append(sock)  # silent from here on
            if len(kept) > cap:
                kept.pop(0).close()
        else:
            sock.close()
            time.sleep(0.05)
    for sock in kept:
        sock.close()
    return counts


def _until_granted(sock: socket.socket, stop: _Stop) -> bool:
    """Read until a GRANT (True) or the connection closes (False)."""
    while not stop.now:
        try:
            data = sock.recv(SIZE + 1)
        except TimeoutError:
            continue
        except OSError:
            return False
        if len(data) != SIZE:
            return False
        if WIRE.unpack(data)[0] == GRANT:
            return True
    return False


# --- running them from a test --------------------------------------------------------------


class Role:
    """One of this module's clients in a process of its own."""

    def __init__(self, role: str, *args: str, nice: int = 0) -> None:
        command = [sys.executable, str(Path(__file__)), role, *args]
        preexec = (lambda: os.nice(nice)) if nice else None
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec
        )

    def finish(self) -> object:
        """SIGTERM it and read what it printed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=20)
        assert self.proc.returncode == 0, err[-2000:]
        return json.loads(out.strip().splitlines()[-1])


@contextlib.contextmanager
def roles(*started: Role) -> Iterator[list[Role]]:
    """Kill whatever is still running on the way out."""
    try:
        yield list(started)
    finally:
        for role in started:
            if role.proc.poll() is None:
                role.proc.kill()
                role.proc.wait()


def connectable(directory: Path, timeout: float) -> float:
    """Seconds until a connection to the directory's socket succeeds (AssertionError after
    `timeout`); a stale socket file left by a killed arbiter does not count."""
    began = time.monotonic()
    while True:
        try:
            connect(directory).close()
            return time.monotonic() - began
        except OSError as err:
            if err.errno not in (errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN):
                raise
        assert time.monotonic() - began < timeout, f"{directory}: no socket in {timeout} s"
        time.sleep(0.005)


def main(argv: list[str]) -> None:
    role, args = argv[0], argv[1:]
    if role == "saturate":
        result: object = saturate(args[0], args[1])
    elif role == "flood":
        result = flood(args[0], args[1:])
    elif role == "hog":
        result = hog(args[0], args[1:])
    elif role == "silent":
        result = silent(args[0], args[1])
    else:
        raise SystemExit(f"unknown role {role!r}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
