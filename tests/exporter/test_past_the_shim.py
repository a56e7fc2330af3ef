"""The host's view end to end: a program that skips the shim is seen, flagged and (opt-in) killed.

Each "container" is a process in its own mount namespace with its container directory
bind-mounted at /var/run/cgpu, as the device plugin and the hook mount it; all of them and the
exporter share one simulated GPU (CGPU_SIM_STATE), whose NVML lists every process's memory.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from exporter_helpers import GIB, MIB, UUID0, ctr
from exporter_proc import Exporter

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare(1)"),
]

GRACE = 6.0


class Contained:
    """`argv` in a new mount namespace that sees `container_dir` at /var/run/cgpu."""

    def __init__(self, container_dir: Path, argv: list[str], env: dict[str, str]) -> None:
        script = (
            "set -e; mount -t tmpfs cgpu-test /run; mkdir /run/cgpu; "
            f"mount --bind {shlex.quote(str(container_dir))} /run/cgpu; "
            f"exec {shlex.join(argv)}"
        )
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        line = self.proc.stdout.readline().strip()
        self.ready_at = time.monotonic()
        if line != "ready":
            self.proc.kill()
            pytest.fail(f"contained workload did not start: {self.proc.stderr.read()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(20)


def _wait(what: str, check: Callable[[], object], timeout: float = 20.0) -> object:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what} (last: {last!r})")


def test_memory_past_the_shim_is_seen_flagged_and_killed(
    tmp_path: Path,
    state_dir: Path,
    make_container: Callable[..., Path],
    sim_env: Callable[..., dict[str, str]],
    workload: Path,
    shim: Path,
) -> None:
    env = sim_env(devices=1, uuids=UUID0, memory="8GiB")
    greedy_dir = make_container(
        "greedy", {UUID0: 256 * MIB}, namespace="ns", pod="greedy", container="c"
    )
    good_dir = make_container("good", {UUID0: GIB}, namespace="ns", pod="good", container="c")
    greedy = ctr("ns", "greedy", "c", UUID0, "0")
    good = ctr("ns", "good", "c", UUID0, "0")

    exporter = Exporter(
        state_dir,
        tmp_path / "exporter.log",
        env,
        "--over-slice-allowance",
        "16MiB",
        "--enforce",
        "--enforce-grace",
        str(GRACE),
        "--enforce-interval",
        "0.3",
    )
    # The neighbour goes through the shim and stays within its slice; so does a process of the
    # greedy container. The bypass is a process of the greedy container with no shim at all.
    neighbour = Contained(good_dir, ["env", f"LD_PRELOAD={shim}", str(workload), "700"], env)
    polite = Contained(greedy_dir, ["env", f"LD_PRELOAD={shim}", str(workload), "100"], env)
    outsider_env = dict(env)
    outsider = None
    bypass = None
    try:
        bypass = Contained(greedy_dir, [str(workload), "600"], env)

        def flagged() -> dict:
            series = exporter.scrape()
            over = series.get("cgpu_container_over_slice", {})
            return series if over.get(greedy) == 1 else {}

        series = _wait("the greedy container to be flagged", flagged)
        assert bypass.proc.poll() is None, "killed before its grace period"
        host = series["cgpu_container_gpu_memory_host_used_bytes"]
        shim_used = series["cgpu_container_gpu_memory_used_bytes"]
        assert host[greedy] == 700 * MIB and shim_used[greedy] == 100 * MIB
        assert host[good] == 700 * MIB and shim_used[good] == 700 * MIB
        assert series["cgpu_container_over_slice"][good] == 0

        # The container zeroes its ledger, as a process inside could: its ledger figures go,
        # but it cannot hide from the host view, and the clock of its grace keeps running.
        ledger = greedy_dir / "cgpu.ledger"
        with open(ledger, "r+b") as f:
            f.write(bytes(ledger.stat().st_size))
        series = exporter.scrape()
        assert greedy not in series["cgpu_container_gpu_memory_used_bytes"]
        assert greedy not in series["cgpu_container_gpu_memory_limit_bytes"]
        assert series["cgpu_container_gpu_memory_host_used_bytes"][greedy] == 700 * MIB
        assert series["cgpu_container_over_slice"][greedy] == 1
        skipped = series["cgpu_ledgers_skipped"]
        assert sum(skipped.values()) == 1, skipped

        # A process in no container is the GPU's, never a container's.
        outsider = subprocess.Popen(
            [str(workload), "50"], env=outsider_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert outsider.stdout is not None and outsider.stdout.readline().strip() == b"ready"
        series = exporter.scrape()
        unattributed = series["cgpu_gpu_memory_unattributed_bytes"]
        assert unattributed[frozenset({("gpu_uuid", UUID0), ("gpu_index", "0")})] == 50 * MIB
        assert series["cgpu_container_gpu_memory_host_used_bytes"][good] == 700 * MIB

        # --enforce: after the grace period every GPU process of the greedy container is killed.
        _wait("the bypass to be killed", lambda: bypass.proc.poll() is not None, 30)
        assert bypass.proc.returncode == -9
        assert time.monotonic() - bypass.ready_at >= GRACE - 0.5
        _wait("the polite process to be killed", lambda: polite.proc.poll() is not None, 10)
        assert polite.proc.returncode == -9
        assert neighbour.proc.poll() is None and outsider.poll() is None

        def cleared() -> dict:
            series = exporter.scrape()
            return series if series["cgpu_container_over_slice"].get(greedy) == 0 else {}

        series = _wait("the flag to clear", cleared)
        assert series["cgpu_container_gpu_memory_host_used_bytes"][greedy] == 0
        assert series["cgpu_enforcement_kills_total"] == {greedy: 2}
        assert neighbour.proc.poll() is None
    finally:
        for proc in (bypass, polite, neighbour):
            if proc is not None:
                proc.stop()
        if outsider is not None:
            outsider.kill()
            outsider.wait()
        code = exporter.stop()
    log = exporter.log.read_text()
    assert code == 0, log
    assert log.count("killed pid") == 2, log
