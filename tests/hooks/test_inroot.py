"""Path resolution inside a hostile root filesystem: nothing may land outside it."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from cgpu.hooks.inroot import Root


@pytest.fixture
def hostile(tmp_path: Path) -> tuple[Path, Path]:
    """A rootfs whose symlinks all point out of it, and the outside directory they aim at."""
    root, outside = tmp_path / "rootfs", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "etc").symlink_to(outside)  # absolute, to a real host directory
    (root / "up").symlink_to("../../../../../../" + str(outside))  # relative escape
    (root / "slash").symlink_to("/")
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("/loop1")
    (root / "file").write_text("x")
    return root, outside


def test_absolute_link_resolves_inside(hostile: tuple[Path, Path]) -> None:
    root, outside = hostile
    with Root(str(root)) as r:
        fd, where = r.lookup("/etc/ld.so.preload", create="file")
        os.close(fd)
    assert where == f"{outside}/ld.so.preload"
    assert (root / str(outside).lstrip("/") / "ld.so.preload").is_file()
    assert list(outside.iterdir()) == []


def test_relative_escape_and_dotdot_stop_at_root(hostile: tuple[Path, Path]) -> None:
    root, outside = hostile
    with Root(str(root)) as r:
        for path in ("/up/a/b", "/../../../up/c", "/slash/slash/up/../../../d"):
            fd, _ = r.lookup(path, create="dir")
            assert os.readlink(f"/proc/self/fd/{fd}").startswith(str(root) + "/")
            os.close(fd)
        fd, where = r.lookup("../../..")
        assert (where, os.readlink(f"/proc/self/fd/{fd}")) == ("/", str(root))
        os.close(fd)
    assert list(outside.iterdir()) == []


def test_symlink_loop_and_file_component_fail(hostile: tuple[Path, Path]) -> None:
    root, _ = hostile
    with Root(str(root)) as r:
        with pytest.raises(OSError, match="too many symlinks"):
            r.lookup("/loop1/x", create="file")
        with pytest.raises(NotADirectoryError):
            r.lookup("/file/x", create="file")
        with pytest.raises(FileNotFoundError):
            r.lookup("/missing/x")


def test_remove_created_rolls_back(hostile: tuple[Path, Path]) -> None:
    root, outside = hostile
    before = sorted(p.name for p in root.iterdir())
    with Root(str(root)) as r:
        for path, kind in (("/var/run/cgpu", "dir"), ("/etc/ld.so.preload", "file")):
            fd, _ = r.lookup(path, create=kind)
            os.close(fd)
        depth = len(Path(str(outside)).parts) - 1  # /etc leads to <rootfs><outside>, made anew
        assert len(r.created) == 3 + depth + 1
        r.remove_created()
    assert sorted(p.name for p in root.iterdir()) == before
    assert list(outside.iterdir()) == []


def test_read_small_never_blocks_or_leaves(hostile: tuple[Path, Path]) -> None:
    root, outside = hostile
    (outside / "secret").write_text("host data")
    (root / "preload").write_bytes(b"/lib/a.so /lib/b.so\n")
    (root / "big").write_bytes(b"x" * 100)
    os.mkfifo(root / "fifo")
    (root / "proc-link").symlink_to("/proc/self/environ")
    done = threading.Event()
    with Root(str(root)) as r:
        assert r.read_small("/preload", 64) == b"/lib/a.so /lib/b.so\n"
        assert r.read_small("/etc/secret", 64) is None  # resolves inside, where it is absent
        assert r.read_small("/big", 64) is None
        assert r.read_small("/fifo", 64) is None
        assert r.read_small("/missing", 64) is None
        done.set()
    assert done.is_set()


def test_refuses_pseudo_filesystems() -> None:
    with Root("/proc") as r, pytest.raises(PermissionError, match="on proc"):
        r.lookup("/cgpu-test-should-not-exist", create="file")

