"""A container's listening socket, `compute.sock` in its directory (SOCK_SEQPACKET, mode 0666).

The socket is made through a descriptor of the directory (`/proc/self/fd/N/compute.sock`), so a
long directory path never meets the 108-byte limit of a socket address, and its mode comes from
the umask at bind time, so no path is chmod'ed (the container may put a link in its place).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cgpu.core.layout import COMPUTE_SOCKET_NAME

BACKLOG = 64
_SOCKET_UMASK = 0o111  # a socket made under it is 0666


@dataclass(frozen=True)
class Listener:
    """A bound, listening, non-blocking socket and the inode it made."""

    directory: Path
    sock: socket.socket
    inode: int

    def fileno(self) -> int:
        """The socket's descriptor (for selectors)."""
        return self.sock.fileno()


@contextlib.contextmanager
def _directory_fd(directory: Path) -> Iterator[int]:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def listen(directory: Path) -> Listener:
    """A new listening socket at `compute.sock` in `directory`, in place of any stale one;
    OSError when that cannot be done.

    It is bound under a temporary name and renamed into place once it listens, so a client
    that sees the file can connect.
    """
    temporary = f".{COMPUTE_SOCKET_NAME}.{os.getpid()}"
    with _directory_fd(directory) as dir_fd:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=dir_fd)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            old_umask = os.umask(_SOCKET_UMASK)
            try:
                sock.bind(f"/proc/self/fd/{dir_fd}/{temporary}")
            finally:
                os.umask(old_umask)
            sock.listen(BACKLOG)
            sock.setblocking(False)
            inode = os.stat(temporary, dir_fd=dir_fd, follow_symlinks=False).st_ino
            os.rename(temporary, COMPUTE_SOCKET_NAME, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=dir_fd)
            raise
    return Listener(directory, sock, inode)


def unlisten(listener: Listener) -> None:
    """Close the socket and unlink its file, unless the file is no longer the one it made."""
    listener.sock.close()
    if intact(listener):
        with contextlib.suppress(OSError), _directory_fd(listener.directory) as dir_fd:
            os.unlink(COMPUTE_SOCKET_NAME, dir_fd=dir_fd)


def intact(listener: Listener) -> bool:
    """Whether the socket file the listener made is still in its directory."""
    try:
        with _directory_fd(listener.directory) as dir_fd:
            info = os.stat(COMPUTE_SOCKET_NAME, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return info.st_ino == listener.inode
