"""Real runc containers for the hook's tests: a minimal rootfs, bundles and a runner."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

BUSYBOX_APPLETS = ("sh", "cat", "ls", "echo", "test", "sleep")
SIM_IN_ROOTFS = "/usr/lib/cgpu-sim"
SIM_ENV = {"CGPU_SIM_MEMORY": "1GiB", "CGPU_SIM_DEVICES": "2"}
CHUNK = 16 << 20  # the probe allocates in 16 MiB steps
_LDD_RE = re.compile(r"(/\S+) \(0x[0-9a-f]+\)$")


def needs_root_and_runc() -> None:
    """Skip without root; fail when runc or busybox is missing (CI installs them)."""
    if os.geteuid() != 0:
        pytest.skip("runc containers need root")
    for tool in ("runc", "busybox"):
        assert shutil.which(tool), f"{tool} is not installed (apt-get install runc busybox-static)"


def _copy_into(rootfs: Path, host_path: str, at: str | None = None) -> None:
    target = rootfs / (at or host_path).lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(host_path, target)  # follows symlinks: the rootfs gets real files


def _shared_libs(binary: Path, env: dict[str, str]) -> set[str]:
    out = subprocess.run(["ldd", str(binary)], env=env, capture_output=True, text=True, check=True)
    return {m.group(1) for line in out.stdout.splitlines() if (m := _LDD_RE.search(line.strip()))}


def build_rootfs(rootfs: Path, probe: Path, sim_dir: Path, shim: Path) -> None:
    """busybox, the C library, the CUDA probe and the simulator: nothing of cgpu's."""
    for d in ("bin", "proc", "dev", "tmp", "etc"):
        (rootfs / d).mkdir(parents=True)
    _copy_into(rootfs, shutil.which("busybox") or "", "/bin/busybox")
    for applet in BUSYBOX_APPLETS:
        (rootfs / "bin" / applet).symlink_to("busybox")
    _copy_into(rootfs, str(probe), "/bin/cuda_probe")
    env = {**os.environ, "LD_LIBRARY_PATH": str(sim_dir)}
    sims = sorted(sim_dir.glob("lib*.so*"))
    libs = set()
    for binary in [probe, shim, *sims]:
        libs |= _shared_libs(binary, env)
    for lib in sorted(libs):
        if not lib.startswith(str(sim_dir)):
            _copy_into(rootfs, lib)
    for sim in sims:
        _copy_into(rootfs, str(sim), f"{SIM_IN_ROOTFS}/{sim.name}")


def snapshot(root: Path) -> set[str]:
    """Every path under `root`, symlinks not followed: what a test compares before and after."""
    found = set()
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(top, name), root))
    return found


def hook_env(sim_dir: Path) -> list[str]:
    """The hook's environment: NVML from the simulator, configured as in the containers."""
    env = {"LD_LIBRARY_PATH": str(sim_dir), **SIM_ENV}
    if os.environ.get("CGPU_NATIVE_DIR"):
        env["CGPU_NATIVE_DIR"] = os.environ["CGPU_NATIVE_DIR"]
    return [f"{k}={v}" for k, v in env.items()]


def hook_entry(state_dir: Path, sim_dir: Path, *action: str) -> dict[str, Any]:
    """An OCI hook running this checkout's `cgpu hook` (-I: runc's cwd is not on sys.path)."""
    argv = [sys.executable, "-I", "-m", "cgpu.cli", "hook", *action, "--state-dir", str(state_dir)]
    return {"path": sys.executable, "args": argv, "env": hook_env(sim_dir), "timeout": 60}


@dataclass
class Bundle:
    """One runc bundle: its directory, rootfs and config, and the runc state root."""

    path: Path
    runc_root: Path
    config: dict[str, Any]
    id: str = field(default_factory=lambda: f"cgpu-test-{uuid.uuid4().hex[:12]}")

    @property
    def rootfs(self) -> Path:
        return self.path / "rootfs"

    def write(self) -> None:
        (self.path / "config.json").write_text(json.dumps(self.config, indent=1))

    def _runc(self, *args: str) -> list[str]:
        return ["runc", "--root", str(self.runc_root), *args]

    def run(self, timeout: int = 60) -> subprocess.CompletedProcess[str]:
        """`runc run` to completion (runc deletes the container, running poststop hooks)."""
        self.write()
        return subprocess.run(
            self._runc("run", "--bundle", str(self.path), self.id),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self) -> subprocess.Popen[str]:
        """`runc run` in the background, with a pipe to the container's stdin."""
        self.write()
        return subprocess.Popen(
            self._runc("run", "--bundle", str(self.path), self.id),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def cleanup(self) -> None:
        subprocess.run(self._runc("delete", "--force", self.id), capture_output=True, check=False)


def oci_config(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """A minimal OCI config: read-only rootfs, its own namespaces, the simulator's env."""
    caps = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
    proc_env = {"PATH": "/bin", "LD_LIBRARY_PATH": SIM_IN_ROOTFS, **SIM_ENV, **env}
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": args,
            "env": [f"{k}={v}" for k, v in proc_env.items()],
            "cwd": "/",
            "capabilities": {k: caps for k in ("bounding", "effective", "permitted")},
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "cgpu-test",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {
                "destination": "/dev",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
            },
            {
                "destination": "/tmp",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "nodev", "mode=1777"],
            },
        ],
        "hooks": {},
        "linux": {
            "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "network")],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/sys/firmware"],
            "readonlyPaths": ["/proc/sys", "/proc/sysrq-trigger"],
        },
    }


def probe_script(*commands: str) -> list[str]:
    """A container command: show the injected files, then run the CUDA probe."""
    return [
        "/bin/sh",
        "-c",
        "echo preload: $(cat /etc/ld.so.preload 2>/dev/null); "
        "echo ledger-dir: $(ls /var/run/cgpu 2>/dev/null); "
        f"exec /bin/cuda_probe direct {' '.join(commands)}",
    ]


def parse_probe(stdout: str) -> dict[str, list[str]]:
    """The probe's output lines by first word (`fill 16 2` -> {"fill": ["16", "2"]})."""
    lines: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        word, _, rest = line.partition(" ")
        lines.setdefault(word.rstrip(":"), rest.split())
    return lines
