"""`cgpu mps-daemon` against the stand-in nvidia-cuda-mps-control: start, defaults, health,
restarts, shutdown, and bad options."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mps_harness import MpsDaemon, install_stand_in, path_env, start_mps_daemon

UUIDS = [f"GPU-bead0000-0000-4000-8000-00000000000{i}" for i in range(2)]


@pytest.fixture
def root() -> Iterator[Path]:
    """A short directory: the stand-in's control socket path must fit in 107 bytes."""
    base = Path(tempfile.mkdtemp(prefix="cgmps-", dir="/tmp"))
    yield base / "mps"
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def daemons() -> Iterator[list[MpsDaemon]]:
    started: list[MpsDaemon] = []
    yield started
    for daemon in started:
        daemon.stop()


def control(bin_dir: Path, pipe: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    env = {
        **path_env(bin_dir),
        "CUDA_MPS_PIPE_DIRECTORY": str(pipe),
        "CUDA_MPS_LOG_DIRECTORY": str(pipe),
    }
    return subprocess.run(
        ["nvidia-cuda-mps-control", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=20,
    )


def cgpu(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cgpu.cli", "mps-daemon", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_stand_in_speaks_as_the_real_control_program(root: Path) -> None:
    bin_dir, pipe = root.parent / "bin", root / "pipe"
    install_stand_in(bin_dir)
    assert control(bin_dir, pipe, "-d").returncode == 0
    assert (pipe / "control").exists() and (pipe / "nvidia-cuda-mps-control.pid").exists()
    try:
        again = control(bin_dir, pipe, "-d")
        assert again.returncode == 1 and "already running" in again.stderr
        asked = control(bin_dir, pipe, stdin="get_default_active_thread_percentage\n")
        assert asked.returncode == 0 and asked.stdout.strip() == "100.0"
        control(bin_dir, pipe, stdin="set_default_active_thread_percentage 40\n")
        asked = control(bin_dir, pipe, stdin="get_default_active_thread_percentage\n")
        assert asked.stdout.strip() == "40.0"
    finally:
        assert control(bin_dir, pipe, stdin="quit\n").returncode == 0
    deadline = time.monotonic() + 5
    while (pipe / "control").exists():
        assert time.monotonic() < deadline, "the daemon did not quit"
        time.sleep(0.05)
    gone = control(bin_dir, pipe, stdin="get_default_active_thread_percentage\n")
    assert gone.returncode == 1 and "Cannot find MPS control daemon" in gone.stderr


def test_one_daemon_per_gpu_with_its_defaults(root: Path, daemons: list[MpsDaemon]) -> None:
    daemon = start_mps_daemon(
        root,
        root.parent / "bin",
        UUIDS,
        "--active-thread-percentage",
        "50",
        "--pinned-mem-limit",
        "4GiB",
    )
    daemons.append(daemon)
    pids = set()
    for uuid in UUIDS:
        assert (root / uuid / "pipe" / "control").exists()
        log = daemon.control_log(uuid)
        # Each daemon sees only its GPU, and got the per-client defaults.
        assert f"CUDA_VISIBLE_DEVICES={uuid}" in log
        assert "Command: set_default_active_thread_percentage 50" in log
        assert "Command: set_default_device_pinned_mem_limit 0 4096M" in log
        assert daemon.health(uuid)["state"] == "ready"
        pids.add(daemon.daemon_pid(uuid))
    assert len(pids) == 2
    assert oct((root / "shm").stat().st_mode & 0o7777) == oct(0o1777)

    ok = cgpu("--check", "--root", str(root))
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.count(": ready") == 2


def test_a_dead_daemon_is_marked_down_then_restarted(root: Path, daemons: list[MpsDaemon]) -> None:
    daemon = start_mps_daemon(root, root.parent / "bin", UUIDS, "--active-thread-percentage", "30")
    daemons.append(daemon)
    first = daemon.kill_daemon(UUIDS[1])

    down = daemon.wait_state(UUIDS[1], "down", timeout=5)
    assert "stopped answering" in down["detail"]
    assert daemon.health(UUIDS[0])["state"] == "ready"  # the other GPU is not touched
    check = cgpu("--check", "--root", str(root))
    assert check.returncode == 1 and UUIDS[1] in check.stderr

    daemon.wait_state(UUIDS[1], "ready", timeout=10)
    assert daemon.daemon_pid(UUIDS[1]) != first
    assert (
        daemon.control_log(UUIDS[1]).count("Command: set_default_active_thread_percentage 30") == 2
    )
    assert "restarting the MPS control daemon" in daemon.log()


def test_sigterm_quits_every_daemon(root: Path, daemons: list[MpsDaemon]) -> None:
    daemon = start_mps_daemon(root, root.parent / "bin", UUIDS)
    pids = [daemon.daemon_pid(u) for u in UUIDS]
    assert daemon.stop() == 0
    for uuid, pid in zip(UUIDS, pids, strict=True):
        assert "Command: quit" in daemon.control_log(uuid)
        assert daemon.health(uuid)["state"] == "down"
        assert not (root / uuid / "pipe" / "control").exists()
        deadline = time.monotonic() + 5
        while Path(f"/proc/{pid}").exists() and "Z" not in _state(pid):
            assert time.monotonic() < deadline, f"daemon {pid} still runs"
            time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def test_a_stale_health_file_is_not_ready(root: Path) -> None:
    from cgpu.core import mpslayout

    mpslayout.write_health(root, UUIDS[0], mpslayout.READY)
    later = time.time() + 60
    assert not mpslayout.read_health(root, UUIDS[0], 10.0, now=later).ready
    assert mpslayout.read_health(root, UUIDS[0], 10.0).ready
    (root / UUIDS[0] / "health.json").write_text("{garbage")
    assert "unreadable" in mpslayout.read_health(root, UUIDS[0]).reason


def test_a_missing_control_program_keeps_the_gpu_down(root: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "cgpu.cli", "mps-daemon", "--root", str(root), "--gpu", UUIDS[0],
         "--compute-mode", "none", "--interval", "0.2", "--control-binary", str(root / "none")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        health = root / UUIDS[0] / "health.json"
        deadline = time.monotonic() + 10
        while not health.exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        from cgpu.core import mpslayout

        state = mpslayout.read_health(root, UUIDS[0])
        assert not state.ready and "not found" in state.reason
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--active-thread-percentage", "101"], "1 to 100"),
        (["--pinned-mem-limit", "lots"], "malformed size"),
        (["--gpu", "../../etc"], "invalid GPU UUID"),
        (["--interval", "0"], "--interval must be positive"),
    ],
)
def test_bad_options_fail_with_a_message(root: Path, args: list[str], message: str) -> None:
    done = cgpu("--root", str(root), "--compute-mode", "none", *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert not list(root.glob("*/pipe")) and not list(root.glob("*/health.json"))
