"""Writing files so that readers see the old content or the new, never half of it."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path


def atomic_write(target: str | os.PathLike[str], data: bytes | str, mode: int = 0o644) -> Path:
    """Write `data` to a temporary file beside `target`, then rename it over `target`."""
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_at(dir_fd: int, name: str, data: bytes, mode: int = 0o644) -> None:
    """Atomically write `name` in the directory open as `dir_fd` (no path is resolved again).

    For writers that have left the mount namespace in which the directory's path means it.
    """
    tmp = f".{name}.{os.getpid()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode, dir_fd=dir_fd)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def read_plain_file(
    path: str | os.PathLike[str],
    limit: int,
    refuse: Callable[[str], Exception],
    check: Callable[[os.stat_result], str | None] | None = None,
) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, never following a symlink or
    blocking on a FIFO. A symlink, anything but a regular file, a larger file, or one `check`
    (given the file's stat) objects to raises `refuse(reason)`; other OSErrors pass through."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise refuse(f"{path}: a symlink") from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refuse(f"{path}: not a regular file")
        objection = check(st) if check else None
        if objection:
            raise refuse(f"{path}: {objection}")
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise refuse(f"{path}: larger than {limit} bytes")
    return data
