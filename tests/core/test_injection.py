"""The one description of what a container gets, and the renderings that must agree with it."""

from __future__ import annotations

import json
from pathlib import Path

from cgpu.core import injection
from cgpu.core.gpus import GPU
from cgpu.core.layout import CONTAINER_LEDGER_DIR, CONTAINER_PRELOAD, CONTAINER_SHIM
from cgpu.hooks import syscalls
from cgpu.hooks.cdi import build_spec
from cgpu.hooks.inject import mount_flags

SHIM = "/usr/local/cgpu/libcgpu.so"


def test_preload_names_the_shim_first_once() -> None:
    assert injection.preload_text() == f"{SHIM}\n".encode()
    existing = f"/lib/x.so:{SHIM}\n /lib/y.so\n\n".encode()
    assert injection.preload_text(existing) == f"{SHIM}\n/lib/x.so\n/lib/y.so\n".encode()
    assert injection.preload_text(b"/lib/a\0b.so /lib/c.so") == f"{SHIM}\n/lib/c.so\n".encode()


def test_write_preload_replaces_the_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "lib" / "ld.so.preload"
    target.parent.mkdir()
    target.write_text("/old/lib.so\n" * 1000)
    assert injection.write_preload(target) == target
    assert target.read_bytes() == f"{SHIM}\n".encode()
    assert [p.name for p in target.parent.iterdir()] == ["ld.so.preload"]  # no temporary left


def test_a_container_can_write_only_its_ledger(tmp_path: Path) -> None:
    mounts = injection.container_mounts("/h/libcgpu.so", "/h/preload", tmp_path)
    by_target = {m.container_path: m for m in mounts}
    assert list(by_target) == [
        CONTAINER_SHIM,
        CONTAINER_PRELOAD,
        CONTAINER_LEDGER_DIR,
        f"{CONTAINER_LEDGER_DIR}/cgpu.ledger",
    ]
    assert [m.read_only for m in mounts] == [True, True, True, False]
    assert by_target[CONTAINER_LEDGER_DIR].host_path == str(tmp_path)
    assert by_target[f"{CONTAINER_LEDGER_DIR}/cgpu.ledger"].host_path == str(
        tmp_path / "cgpu.ledger"
    )
    # Only the shim may be mapped executable.
    assert [m.executable for m in mounts] == [True, False, False, False]
    assert injection.environment() == {"CGPU_LEDGER_DIR": CONTAINER_LEDGER_DIR}


def test_hook_flags_follow_the_description(tmp_path: Path) -> None:
    shim, preload, directory, ledger = injection.container_mounts("/s", "/p", tmp_path)
    nosuid_nodev = syscalls.MS_NOSUID | syscalls.MS_NODEV
    assert mount_flags(shim) == nosuid_nodev | syscalls.MS_RDONLY
    assert mount_flags(preload) == nosuid_nodev | syscalls.MS_RDONLY | syscalls.MS_NOEXEC
    assert mount_flags(directory) == nosuid_nodev | syscalls.MS_RDONLY | syscalls.MS_NOEXEC
    assert mount_flags(ledger) == nosuid_nodev | syscalls.MS_NOEXEC


def test_cdi_spec_mounts_the_described_shim_and_preload() -> None:
    gpu = GPU(0, "GPU-5eed0000-0000-4000-8000-000000000000", "sim", 1 << 30)
    spec = build_spec([gpu], ["/usr/bin/cgpu"], "/var/lib/cgpu", "/h/libcgpu.so", "/h/preload")
    assert spec["containerEdits"]["mounts"] == [
        {
            "hostPath": "/h/libcgpu.so",
            "containerPath": CONTAINER_SHIM,
            "options": ["ro", "nosuid", "nodev", "bind"],
        },
        {
            "hostPath": "/h/preload",
            "containerPath": CONTAINER_PRELOAD,
            "options": ["ro", "nosuid", "nodev", "bind", "noexec"],
        },
    ]
    json.dumps(spec)  # a CDI spec is JSON
