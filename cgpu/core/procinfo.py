"""What the host's /proc says about one process, for telling which container it belongs to.

Everything here is read by the host from the kernel, never from files a container wrote: the
pid namespace (`/proc/<pid>/ns/pid`), the pid inside it (`NSpid`), the start time, the cgroup,
and which file the process sees at `/var/run/cgpu/cgpu.ledger`, resolved inside the process's
own root and mount namespace as openat2(RESOLVE_IN_ROOT) does, so no symlink of the container's
can point the lookup at a host path.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from dataclasses import dataclass

from cgpu.core.layout import CONTAINER_LEDGER_DIR, LEDGER_NAME
from cgpu.core.procfs import start_time

IN_CONTAINER_LEDGER = f"{CONTAINER_LEDGER_DIR.strip('/')}/{LEDGER_NAME}"
CGROUP_MAX_BYTES = 64 * 1024

# openat2(2): the same number on every architecture that has it (added in Linux 5.6).
_SYS_OPENAT2 = 437
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_openat2_works = platform.system() == "Linux"


@dataclass(frozen=True)
class HostProcess:
    """One process as the host sees it. Fields are None where /proc did not answer."""

    pid: int
    start_time: int
    nspid: int | None  # its pid in its own (innermost) pid namespace
    pidns: int | None  # inode of its pid namespace
    cgroup: str  # /proc/<pid>/cgroup
    ledger_id: tuple[int, int] | None  # (st_dev, st_ino) of what it sees as its ledger


def _read(path: str, limit: int) -> bytes:
    with open(path, "rb", buffering=0) as handle:
        return handle.read(limit)


def _nspid(pid: int) -> int | None:
    try:
        status = _read(f"/proc/{pid}/status", 16384)
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith(b"NSpid:"):
            fields = line.split()[1:]
            return int(fields[-1]) if fields and fields[-1].isdigit() else None
    return None


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _open_in_root(root_fd: int, path: str) -> int:
    how = _OpenHow(
        os.O_PATH | os.O_CLOEXEC | os.O_NOFOLLOW, 0, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS
    )
    fd = _libc.syscall(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_long(root_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


def ledger_seen_by(pid: int) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the file at /var/run/cgpu/cgpu.ledger in `pid`'s root, else None."""
    global _openat2_works
    if not _openat2_works:
        return None
    try:
        root = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fd = _open_in_root(root, IN_CONTAINER_LEDGER)
    except OSError as exc:
        if exc.errno == errno.ENOSYS:  # a kernel before 5.6: this rule is not available
            _openat2_works = False
        return None
    finally:
        os.close(root)
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return (st.st_dev, st.st_ino)


def cgroup_of(pid: int) -> str:
    """The process's cgroup paths (/proc/<pid>/cgroup), "" when unreadable."""
    try:
        return _read(f"/proc/{pid}/cgroup", CGROUP_MAX_BYTES).decode(errors="replace")
    except OSError:
        return ""


def inspect(pid: int) -> HostProcess | None:
    """The host's facts about `pid`, or None when there is no such process."""
    started = start_time(pid)
    if started is None:
        return None
    return HostProcess(
        pid=pid,
        start_time=started,
        nspid=_nspid(pid),
        pidns=pidns_of(pid),
        cgroup=cgroup_of(pid),
        ledger_id=ledger_seen_by(pid),
    )


def pidns_of(pid: int) -> int | None:
    """The inode of `pid`'s pid namespace, None when it cannot be read."""
    return _inode(f"/proc/{pid}/ns/pid")


def own_pidns() -> int | None:
    """The inode of this process's own pid namespace (the host's, in a hostPID pod)."""
    return _inode("/proc/self/ns/pid")
