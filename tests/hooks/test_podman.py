"""Real podman containers with the hooks.d file and the CDI spec exactly as cgpu writes them.

The image is imported from a tarball (busybox, the C library, the CUDA probe and the
simulator: no registry). podman runs with a storage root of its own under the test's tmp
dir, `--hooks-dir` naming the directory `cgpu hook install` wrote to, and CDI specs from
/var/run/cdi (podman 4.3 reads only /etc/cdi and /var/run/cdi). The host has no GPU, so the
hooks and `cgpu cdi` are told `--simulate`, and the containers use the simulator too.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hook_runc import CHUNK, SIM_IN_ROOTFS, parse_probe, probe_script

from cgpu.core.containers import containers_root

CGPU = [sys.executable, "-I", "-m", "cgpu.cli"]
IMAGE = "localhost/cgpu-probe:test"
CDI_DIR = Path("/var/run/cdi")
DEFAULT_SIM_TOTAL = 16 << 30  # the simulator's one GPU when CGPU_SIM_* is unset
# podman (as root) raises RLIMIT_NOFILE and RLIMIT_NPROC in the container to 1048576 and
# 32768; where the host lacks CAP_SYS_RESOURCE (this CI's sandbox) runc then fails with
# "error setting rlimit type 7: operation not permitted". Lower values work everywhere.
ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]


def _cgpu_executable() -> str:
    """The installed `cgpu` script next to this interpreter, as an operator would name it."""
    script = Path(sys.executable).parent / "cgpu"
    return str(script) if script.is_file() else shutil.which("cgpu") or "cgpu"


class Podman:
    """podman with its own storage and hooks directory."""

    def __init__(self, base: Path) -> None:
        self.hooks_dir = base / "hooks.d"
        self.hooks_dir.mkdir(parents=True)
        self.globals = [
            "--root", str(base / "root"), "--runroot", str(base / "run"),
            "--tmpdir", str(base / "tmp"), "--hooks-dir", str(self.hooks_dir),
            "--cgroup-manager", "cgroupfs", "--events-backend", "file",
        ]  # fmt: skip

    def __call__(self, *args: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["podman", *self.globals, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def run(self, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
        """`podman run --rm` of the probe image; `args` are options, then the command."""
        envs = [f"--env={k}={v}" for k, v in {"LD_LIBRARY_PATH": SIM_IN_ROOTFS, **env}.items()]
        return self("run", "--rm", "--network", "none", *ULIMITS, *envs, *args)


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory, rootfs_template: Path) -> Iterator[Podman]:
    """podman with the probe image imported; skipped only where podman is not installed."""
    if not shutil.which("podman"):
        pytest.skip("podman is not installed (scripts/setup.sh installs Debian's)")
    base = tmp_path_factory.mktemp("podman")
    tar = base / "rootfs.tar"
    subprocess.run(["tar", "-C", str(rootfs_template), "-cf", str(tar), "."], check=True)
    pm = Podman(base / "podman")
    imported = pm("import", "--quiet", str(tar), IMAGE)
    assert imported.returncode == 0, imported.stderr
    yield pm
    pm("rm", "--all", "--force")
    pm("rmi", "--all", "--force")


def _install_hook(pm: Podman, state_dir: Path) -> dict[str, object]:
    cmd = [*CGPU, "hook", "install", "--dir", str(pm.hooks_dir), "--cgpu", _cgpu_executable()]
    cmd += ["--state-dir", str(state_dir), "--simulate"]
    subprocess.run(cmd, check=True, capture_output=True)
    return json.loads((pm.hooks_dir / "cgpu.json").read_text())


@contextlib.contextmanager
def _cdi_spec(state_dir: Path) -> Iterator[dict[str, object]]:
    """`cgpu cdi` into /var/run/cdi/cgpu.json for the block, restoring what was there."""
    CDI_DIR.mkdir(parents=True, exist_ok=True)
    target = CDI_DIR / "cgpu.json"
    with open(CDI_DIR / ".cgpu-test.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one test run at a time owns the spec
        saved = target.read_bytes() if target.exists() else None
        try:
            cmd = [*CGPU, "cdi", "--output", str(target), "--state-dir", str(state_dir)]
            subprocess.run([*cmd, "--cgpu", _cgpu_executable(), "--simulate"], check=True)
            yield json.loads(target.read_text())
        finally:
            if saved is None:
                target.unlink(missing_ok=True)
            else:
                target.write_bytes(saved)


def _leftovers(state_dir: Path) -> list[str]:
    root = containers_root(state_dir)
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def test_hooks_d_limits_a_container(podman: Podman, state_dir: Path) -> None:
    entry = _install_hook(podman, state_dir)
    assert entry["stages"] == ["createRuntime", "poststop"]
    assert entry["hook"]["args"][1:] == ["hook", "--state-dir", str(state_dir), "--simulate"]
    result = podman.run({"CGPU_MEM_LIMIT": "160MiB"}, IMAGE, *probe_script("init", "fill",
                        str(CHUNK), "info"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = parse_probe(result.stdout)
    assert out["preload"] == ["/usr/local/cgpu/libcgpu.so"]
    assert out["ledger-dir"] == ["cgpu.conf", "cgpu.ledger", "ld.so.preload", "meta.json"]
    # The probe's own allocations stop at the slice, and the slice is what it sees as total.
    assert (int(out["fill"][0]) * CHUNK, int(out["info"][2])) == (160 << 20, 160 << 20)
    assert _leftovers(state_dir) == []  # poststop removed the container's directory


def test_hooks_d_leaves_a_container_without_a_request_alone(
    podman: Podman, state_dir: Path
) -> None:
    _install_hook(podman, state_dir)
    result = podman.run({}, IMAGE, *probe_script("init", "info"))
    assert result.returncode == 0, result.stderr
    out = parse_probe(result.stdout)
    assert (out["preload"], out["ledger-dir"]) == ([], [])
    assert int(out["info"][2]) == DEFAULT_SIM_TOTAL
    assert _leftovers(state_dir) == []


def test_hooks_d_refuses_a_malformed_request(podman: Podman, state_dir: Path) -> None:
    _install_hook(podman, state_dir)
    result = podman.run({"CGPU_MEM_LIMIT": "4 GB"}, IMAGE, "/bin/echo", "started")
    assert result.returncode != 0
    assert "started" not in result.stdout
    assert "cgpu hook: CGPU_MEM_LIMIT: malformed size '4 GB'" in result.stderr
    assert _leftovers(state_dir) == []


def test_cdi_spec_loads_and_limits(podman: Podman, state_dir: Path) -> None:
    with _cdi_spec(state_dir) as spec:
        assert spec["cdiVersion"] == "0.5.0"
        env = {"CGPU_MEM_LIMIT": "192MiB"}
        device = "--device=cgpu.io/gpu-mem=0"
        script = probe_script("init", "fill", str(CHUNK), "info")
        limited = podman.run(env, device, IMAGE, *script)
        # A CDI device with no limit variable: the shim is there, with no slice to hold.
        unlimited = podman.run({}, device, IMAGE, *probe_script("init", "info"))
        env_out = podman.run({}, device, IMAGE, "/bin/sh", "-c", "echo $CGPU_CDI_DEVICE_0")
    assert limited.returncode == 0, limited.stderr
    out = parse_probe(limited.stdout)
    assert out["preload"] == ["/usr/local/cgpu/libcgpu.so"]
    assert (int(out["fill"][0]) * CHUNK, int(out["info"][2])) == (192 << 20, 192 << 20)
    assert unlimited.returncode == 0, unlimited.stderr
    out = parse_probe(unlimited.stdout)
    assert out["preload"] == ["/usr/local/cgpu/libcgpu.so"]
    assert int(out["info"][2]) == DEFAULT_SIM_TOTAL
    assert env_out.stdout.strip().startswith("GPU-"), env_out.stderr
    assert _leftovers(state_dir) == []


def test_podman_refuses_the_old_cdi_version(podman: Podman, state_dir: Path) -> None:
    """Why the version matters: this podman's CDI library does not know 0.6.0 (issue 12)."""
    version = podman("version", "--format", "{{.Client.Version}}").stdout.strip()
    if not version.startswith("4."):
        pytest.skip(f"podman {version} knows newer CDI versions")
    with _cdi_spec(state_dir) as spec:
        spec["cdiVersion"] = "0.6.0"
        (CDI_DIR / "cgpu.json").write_text(json.dumps(spec))
        result = podman.run({}, "--device=cgpu.io/gpu-mem=0", IMAGE, "/bin/true")
    assert result.returncode != 0
    assert "unresolvable CDI devices cgpu.io/gpu-mem=0" in result.stderr

