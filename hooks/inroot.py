"""Paths inside a container's root filesystem, resolved as openat2(RESOLVE_IN_ROOT) resolves them.

The root filesystem belongs to the container's image, so any of its components may be a symlink
meant to lead the hook out (`/etc -> /`, `/var/run -> ../../../../host`). Every lookup here walks
one component at a time from a file descriptor of the root, opens each with O_NOFOLLOW, and
follows a symlink by reading it and resolving its target again from the root: an absolute target
restarts at the root and `..` never climbs above it. No path inside the root is ever handed to
the kernel whole, so the kernel never follows a link on our behalf.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Literal

from cgpu.hooks.syscalls import fs_magic

MAX_LINKS = 40
_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC

# Pseudo filesystems a rootfs symlink could lead into: creating a directory there (a cgroup, say)
# or mounting over one of their files would act on the kernel, not on the container's files.
PSEUDO_FILESYSTEMS = {
    0x9FA0: "proc",
    0x62656572: "sysfs",
    0x27E0EB: "cgroup",
    0x63677270: "cgroup2",
    0x1CD1: "devpts",
    0x64626720: "debugfs",
    0x74726163: "tracefs",
    0x73636673: "securityfs",
    0xCAFE4A11: "bpf",
    0x19800202: "mqueue",
    0x42494E4D: "binfmt_misc",
    0x6E736673: "nsfs",
    0xF97CFF8C: "selinuxfs",
    0x6165676C: "pstore",
    0xDE5E81E4: "efivarfs",
    0x67596969: "configfs",
}

Create = Literal["dir", "file"] | None


def _components(path: str) -> list[str]:
    """The components of `path`, reversed so that pop() yields them in order."""
    if "\0" in path:
        raise ValueError(f"invalid path {path!r}")
    return [c for c in reversed(path.split("/")) if c not in ("", ".")]


class Root:
    """A container root filesystem, opened once; every path given is resolved inside it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.created: list[tuple[str, bool]] = []  # (in-root path, is a directory), in order

    def close(self) -> None:
        """Close the root's descriptor."""
        os.close(self.fd)

    def __enter__(self) -> Root:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def lookup(self, path: str, create: Create = None) -> tuple[int, str]:
        """Open `path` inside the root as an O_PATH descriptor; return it and its in-root path.

        With `create`, missing components are made: directories on the way, and the last one as
        an empty file ("file") or a directory ("dir"). What is made is recorded in `created`.
        """
        todo = _components(path)
        dirs = [os.dup(self.fd)]
        names: list[str] = []
        links = 0
        try:
            while todo:
                name = todo.pop()
                if name == "..":
                    if len(dirs) > 1:
                        os.close(dirs.pop())
                        names.pop()
                    continue
                last = not todo
                kind: Create = create if last else ("dir" if create else None)
                fd = self._open(dirs[-1], names, name, kind)
                mode = os.fstat(fd).st_mode
                if stat.S_ISLNK(mode):
                    target = os.readlink("", dir_fd=fd)
                    os.close(fd)
                    links += 1
                    if links > MAX_LINKS:
                        raise OSError(errno.ELOOP, f"too many symlinks in {path}")
                    if target.startswith("/"):
                        while len(dirs) > 1:
                            os.close(dirs.pop())
                        names.clear()
                    todo.extend(_components(target))
                elif stat.S_ISDIR(mode):
                    dirs.append(fd)
                    names.append(name)
                elif last:
                    names.append(name)
                    return fd, "/" + "/".join(names)
                else:
                    os.close(fd)
                    raise NotADirectoryError(errno.ENOTDIR, f"{path}: /{name} is not a directory")
            return dirs.pop(), "/" + "/".join(names)
        finally:
            for fd in dirs:
                os.close(fd)

    def _open(self, parent: int, names: list[str], name: str, create: Create) -> int:
        """Open one component without following it, making it when missing and asked to."""
        try:
            return os.open(name, _FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if create is None:
                raise
        where = "/" + "/".join([*names, name])
        refuse_pseudo_fs(parent, where)
        if create == "dir":
            os.mkdir(name, 0o755, dir_fd=parent)
        else:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            os.close(os.open(name, flags, 0o644, dir_fd=parent))
        self.created.append((where, create == "dir"))
        return os.open(name, _FLAGS, dir_fd=parent)

    def read_small(self, path: str, limit: int) -> bytes | None:
        """The content of a regular file inside the root of at most `limit` bytes, else None."""
        try:
            fd, _ = self.lookup(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or not 0 < info.st_size <= limit:
                return None
            if fs_magic(fd) in PSEUDO_FILESYSTEMS:
                return None
            flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
            data_fd = os.open(f"/proc/self/fd/{fd}", flags)
            try:
                return os.read(data_fd, limit)
            finally:
                os.close(data_fd)
        finally:
            os.close(fd)

    def remove_created(self) -> None:
        """Remove, newest first, everything `lookup` made; best effort, for rolling back."""
        while self.created:
            where, is_dir = self.created.pop()
            parent, _, name = where.rpartition("/")
            try:
                fd, _ = self.lookup(parent or "/")
            except OSError:
                continue
            try:
                if is_dir:
                    os.rmdir(name, dir_fd=fd)
                else:
                    os.unlink(name, dir_fd=fd)
            except OSError:
                pass
            finally:
                os.close(fd)


def refuse_pseudo_fs(fd: int, where: str) -> None:
    """Raise PermissionError when `fd` is on a kernel pseudo filesystem (proc, sysfs, cgroup...)."""
    name = PSEUDO_FILESYSTEMS.get(fs_magic(fd))
    if name:
        raise PermissionError(
            errno.EPERM, f"{where} is on {name}; refusing to write or mount there"
        )
