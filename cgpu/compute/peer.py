"""The process at the other end of a connection (SO_PEERCRED), and whether it can still run."""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass

from cgpu.core.procfs import state_and_start_time

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_HALTED = frozenset(b"TtZX")  # stopped, traced-stopped, zombie, dead


@dataclass(frozen=True)
class Peer:
    """A peer process as the arbiter's pid namespace sees it."""

    pid: int
    start_time: int | None  # /proc start time when it connected, to tell a reused pid


def peer_of(sock: socket.socket) -> Peer | None:
    """The connected process, or None when the kernel cannot name it."""
    try:
        pid, _, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    except (OSError, struct.error):
        return None
    if pid <= 0:
        return None
    stat = state_and_start_time(pid)
    return Peer(pid, stat[1] if stat else None)


def halted(peer: Peer) -> bool:
    """Whether the process is stopped, dead or gone (its pid now someone else's counts).

    Judged from every thread: a process whose main thread has exited (a zombie thread) while
    its workers still run, or whose main thread alone is stopped, is not halted.
    """
    stat = state_and_start_time(peer.pid)
    if stat is None:
        return True
    state, start_time = stat
    if peer.start_time is not None and start_time != peer.start_time:
        return True
    if state not in _HALTED:
        return False
    return all(thread_state(peer.pid, tid) in _HALTED for tid in _threads(peer.pid))


def _threads(pid: int) -> list[int]:
    """The thread ids of a process (none when it has gone)."""
    try:
        return [int(name) for name in os.listdir(f"/proc/{pid}/task") if name.isdigit()]
    except OSError:
        return []


def thread_state(pid: int, tid: int) -> int:
    """The state letter (a byte value) of one thread; X when it has gone."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat", "rb") as stat:
            line = stat.read(4096)
        return line[line.rindex(b")") + 2]
    except (OSError, ValueError, IndexError):
        return ord("X")
