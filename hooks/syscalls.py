"""The few Linux system calls the hook needs that Python's os module lacks."""

from __future__ import annotations

import ctypes
import os

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MNT_DETACH = 0x2
CLONE_NEWNS = 0x20000

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_void_p,
]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.fstatfs.argtypes = [ctypes.c_int, ctypes.c_void_p]


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, flags: int, name: str) -> None:
    """mount(2) with no filesystem type and no data (binds and remounts); `name` is for errors."""
    src = source.encode() if source is not None else None
    _check(_libc.mount(src, target.encode(), None, flags, None), f"cannot mount on {name}")


def umount(target: str) -> None:
    """Detach the mount at `target` (lazily, as umount -l does)."""
    _check(_libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")


def setns(fd: int, nstype: int) -> None:
    """Move this (single-threaded) process into the namespace that `fd` refers to."""
    _check(_libc.setns(fd, nstype), "setns")


def fs_magic(fd: int) -> int:
    """The filesystem type (statfs f_type) of the file `fd` refers to; O_PATH fds work."""
    buf = ctypes.create_string_buffer(256)  # struct statfs; f_type is its first long
    _check(_libc.fstatfs(fd, buf), "fstatfs")
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF
