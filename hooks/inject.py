"""Bind the shim, /etc/ld.so.preload and the ledger directory into a container being created.

This runs as its own short-lived process (`cgpu.hooks.hook.run_injector`, the plan as JSON on
stdin), because setns(CLONE_NEWNS) needs a single-threaded process and the hook proper has
loaded NVML. It enters the mount namespace of the container's init process (which waits, before
pivot_root, while prestart and createRuntime hooks run) and mounts there, onto paths inside the
root filesystem resolved by `cgpu.hooks.inroot`. The host mount namespace is never changed. It
makes inside the container what `cgpu.core.injection` describes (the shim, `/etc/ld.so.preload`,
the container directory at `/var/run/cgpu` with its ledger writable); the ld.so.preload names the
shim first, then whatever the image's own file named, and is written into the container
directory and bound from there.

On any failure it undoes its mounts and removes the mount points it created, then exits 1 with
one line on stderr.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass

from cgpu.core.files import atomic_write_at
from cgpu.core.injection import Mount, container_mounts, preload_text
from cgpu.core.layout import CONTAINER_PRELOAD, CONTAINER_SHIM, LEDGER_NAME, PRELOAD_NAME
from cgpu.hooks import syscalls
from cgpu.hooks.errors import one_line
from cgpu.hooks.inroot import Create, Root, refuse_pseudo_fs

PRELOAD_LIMIT = 64 * 1024


@dataclass(frozen=True)
class Plan:
    """What to inject: the container's init pid, its rootfs path, and the host sources."""

    pid: int
    rootfs: str
    container_dir: str
    shim: str


def mount_flags(mount: Mount) -> int:
    """The mount(2) flags of a remount that applies `mount`'s options."""
    flags = syscalls.MS_NOSUID | syscalls.MS_NODEV
    if mount.read_only:
        flags |= syscalls.MS_RDONLY
    if not mount.executable:
        flags |= syscalls.MS_NOEXEC
    return flags


def enter_mount_namespace(pid: int) -> None:
    """Join the mount namespace of `pid`; refuse when it is our own."""
    ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    try:
        theirs, ours = os.fstat(ns), os.stat("/proc/self/ns/mnt")
        if (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino):
            raise ValueError(
                "the container shares the runtime's mount namespace; "
                "run cgpu hook as a prestart or createRuntime hook of a container with one"
            )
        syscalls.setns(ns, syscalls.CLONE_NEWNS)
    finally:
        os.close(ns)


class Mounts:
    """Bind mounts made inside one root, remembered so that they can be undone."""

    def __init__(self, root: Root) -> None:
        self.root = root
        self.done: list[tuple[int, str]] = []  # (descriptor of the new mount, its path)

    def bind(self, source: str, expect: os.stat_result, target: str, flags: int) -> None:
        """Bind `source` (a host path, checked to be `expect`) onto `target` inside the root."""
        src = os.open(source, os.O_PATH | os.O_CLOEXEC)
        try:
            if not _same(os.fstat(src), expect):
                raise OSError(f"{source} is not the same file in the container's mount namespace")
            kind: Create = "dir" if stat.S_ISDIR(expect.st_mode) else "file"
            dst, where = self.root.lookup(target, create=kind)
            try:
                if stat.S_ISDIR(os.fstat(dst).st_mode) != (kind == "dir"):
                    want = "a directory" if kind == "dir" else "not a directory"
                    raise OSError(f"{target} (at {where} in the rootfs) must be {want}")
                refuse_pseudo_fs(dst, target)
                syscalls.mount(
                    f"/proc/self/fd/{src}", f"/proc/self/fd/{dst}", syscalls.MS_BIND, target
                )
            finally:
                os.close(dst)
            top, _ = self.root.lookup(target)
            if not _same(os.fstat(top), expect):
                os.close(top)  # not ours to undo: the container is torn down when we fail
                raise OSError(f"{target}: the new mount is not where it was made")
            self.done.append((top, target))
            remount = syscalls.MS_BIND | syscalls.MS_REMOUNT | flags
            syscalls.mount(None, f"/proc/self/fd/{top}", remount, target)
        finally:
            os.close(src)

    def undo(self) -> None:
        """Detach every mount made, newest first."""
        while self.done:
            fd, _ = self.done.pop()
            try:
                syscalls.umount(f"/proc/self/fd/{fd}")
            except OSError:
                pass
            finally:
                os.close(fd)

    def close(self) -> None:
        """Forget the mounts (they stay), closing their descriptors."""
        while self.done:
            os.close(self.done.pop()[0])


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _already_there(root: Root, target: str, source: os.stat_result) -> bool:
    """Whether `target` in the root already is `source` (a CDI spec may have mounted it)."""
    try:
        fd, _ = root.lookup(target)
    except OSError:
        return False
    try:
        return _same(os.fstat(fd), source)
    finally:
        os.close(fd)


def inject(plan: Plan) -> None:
    """Carry out `plan`; on failure leave nothing behind and re-raise."""
    # Open the host sources first, in the runtime's namespace, to check them once inside.
    dir_fd = os.open(plan.container_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        dir_st = os.fstat(dir_fd)
        ledger_st = os.stat(LEDGER_NAME, dir_fd=dir_fd, follow_symlinks=False)
        shim_st = os.stat(plan.shim)
        enter_mount_namespace(plan.pid)
        with Root(plan.rootfs) as root:
            mounts = Mounts(root)
            try:
                preload = preload_text(root.read_small(CONTAINER_PRELOAD, PRELOAD_LIMIT))
                atomic_write_at(dir_fd, PRELOAD_NAME, preload)
                preload_st = os.stat(PRELOAD_NAME, dir_fd=dir_fd, follow_symlinks=False)
                preload_src = os.path.join(plan.container_dir, PRELOAD_NAME)
                expected = {
                    plan.shim: shim_st,
                    preload_src: preload_st,
                    plan.container_dir: dir_st,
                    os.path.join(plan.container_dir, LEDGER_NAME): ledger_st,
                }
                for mount in container_mounts(plan.shim, preload_src, plan.container_dir):
                    source_st = expected[mount.host_path]
                    if mount.container_path == CONTAINER_SHIM and _already_there(
                        root, CONTAINER_SHIM, source_st
                    ):
                        continue  # a CDI spec has mounted it
                    flags = mount_flags(mount)
                    mounts.bind(mount.host_path, source_st, mount.container_path, flags)
            except BaseException:
                mounts.undo()
                root.remove_created()
                raise
            mounts.close()
    finally:
        os.close(dir_fd)


def main() -> int:
    """Read the plan from stdin and inject; one line on stderr on failure."""
    try:
        plan = Plan(**json.loads(sys.stdin.read()))
        inject(plan)
    except (OSError, ValueError, TypeError) as exc:
        print(one_line(exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
