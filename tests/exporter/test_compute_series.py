"""The compute share series, from real shim workloads on the simulator's kernel timeline.

A container with a `compute` line in its cgpu.conf runs saturating kernels under the shim; the
shim's controller measures its share of the GPU's time into the ledger, and the exporter reports
the limit and that share. A container without a compute limit gets neither series.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from exporter_helpers import GIB, UUID0, ctr, scrape

from cgpu.core.layout import CONFIG_NAME
from cgpu.exporter.collector import CgpuCollector

LIMIT = "cgpu_container_gpu_compute_limit_percent"
USED = "cgpu_container_gpu_compute_used_percent"
MS = 1_000_000


class Saturating:
    """A container process launching 1 ms kernels back to back until stopped."""

    def __init__(self, exe: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [str(exe), str(MS)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            pytest.fail(f"workload did not start: {line!r} {self.proc.communicate()[1]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.communicate(input="", timeout=30)
        assert self.proc.returncode == 0, self.proc.stderr


@pytest.fixture
def saturating(compute_workload: Path) -> Iterator[Callable[[dict[str, str]], Saturating]]:
    started: list[Saturating] = []

    def start(env: dict[str, str]) -> Saturating:
        started.append(Saturating(compute_workload, env))
        return started[-1]

    yield start
    for workload in started:
        if workload.proc.poll() is None:
            workload.proc.kill()
            workload.proc.wait()


def _steady(collector: CgpuCollector, key: frozenset, low: float, high: float) -> list[float]:
    """Scrape until the used series stays in [low, high] for 3 scrapes in a row (or 20 s)."""
    seen: list[float] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        seen.append(scrape(collector).get(USED, {}).get(key, -1.0))
        if len(seen) >= 3 and all(low <= v <= high for v in seen[-3:]):
            break
        time.sleep(0.5)
    return seen


def test_limited_container_reports_its_cap_and_measured_share(
    state_dir: Path,
    make_container: Callable[..., Path],
    sim_env: Callable[..., dict[str, str]],
    shim: Path,
    saturating: Callable[[dict[str, str]], Saturating],
) -> None:
    limited = make_container("capped", {UUID0: GIB}, namespace="ml", pod="p", container="train")
    with open(limited / CONFIG_NAME, "a") as conf:
        conf.write(f"compute {UUID0} 30\n")  # as the device plugin writes it
    free = make_container("open", {UUID0: GIB}, namespace="ml", pod="q", container="serve")
    env = sim_env(extra={"LD_PRELOAD": str(shim)})
    capped = saturating({**env, "CGPU_LEDGER_DIR": str(limited)})
    collector = CgpuCollector(state_dir)
    train, serve = ctr("ml", "p", "train", UUID0, ""), ctr("ml", "q", "serve", UUID0, "")

    # Alone on its GPU the shim's controller holds the cap (beside a busy neighbour, without the
    # arbiter, NVML's one-process-per-period attribution makes it swing: tests/compute and
    # docs/performance.md); the exporter reports what it measured.
    seen = _steady(collector, train, 20, 40)
    assert all(20 <= v <= 40 for v in seen[-3:]), f"measured shares: {seen}"
    saturating({**env, "CGPU_LEDGER_DIR": str(free)})  # competes for the same GPU, unlimited
    series = scrape(collector)
    assert series[LIMIT] == {train: 30}  # only the container with a compute limit
    assert serve not in series.get(USED, {})
    assert series["cgpu_container_gpu_memory_limit_bytes"][serve] == GIB

    # Stopped, the container still has its cap; the share it uses falls to 0.
    capped.stop()
    seen = _steady(collector, train, 0, 1)
    assert seen[-1] <= 1, f"shares after the stop: {seen}"
    assert scrape(collector)[LIMIT] == {train: 30}
