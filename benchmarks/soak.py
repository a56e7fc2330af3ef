"""A soak of the host daemons: thousands of container lifecycles, the exporter scraped each second.

    python benchmarks/soak.py [--lifecycles 2000] [--seed 1] [--workers 3] [--json FILE]

Runs `cgpu device-plugin`, `cgpu dra-driver` and `cgpu exporter` as processes on a simulated
2-GPU node (benchmarks/soak_stack.py) and drives `--lifecycles` container lifecycles through
them and `cgpu hook`, the three kinds in turn, `--workers` at a time
(benchmarks/soak_lifecycles.py): allocate, a real process under the real shim that retains a
context and allocates, exit or SIGKILL (half each, drawn from `--seed`), remove. Every second
it samples each daemon's resident memory and open file descriptors from /proc and scrapes the
exporter over HTTP. Afterwards it checks:

- flat after warm-up: RSS and fds grow by at most `--max-growth` (5%) over the second half
  (the median of the last 10% of samples against the median at 45-55%);
- no leftovers: no container directory, ledger, CDI spec or DRA checkpoint entry remains;
- exact ledger totals: every ledger read exactly its process's bytes plus the context cost
  while it held, and exactly zero once the process was gone; at the end NVML shows no memory
  used and the exporter no container;
- scrapes: p99 at most `--max-scrape-p99-ms` (100 ms), none failed.

Prints a table (and the JSON report with --json), and exits 1 when a criterion is missed.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent import futures
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the soak's modules, also under -P
from soak_lifecycles import DevicePool, Plan, PodList, Reaper, plans, run_one
from soak_report import (
    Sample,
    Series,
    growth,
    leftovers,
    percentiles,
    slow_scrapes,
    table,
    verdict,
)
from soak_stack import Node, start_node, wait_for

HERE = Path(__file__).resolve().parent
MAX_FAILURES = 20  # stop early: something is broken, and the rest would only repeat it


def scrape(url: str) -> str:
    """One scrape's body; raises on anything but 200."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.read().decode()


class Sampler:
    """benchmarks/soak_sampler.py as a process: the daemons sampled, the exporter scraped."""

    def __init__(self, node: Node) -> None:
        self.out = node.root / "samples.json"
        pids = [f"{d.name}={d.proc.pid}" for d in node.daemons]
        self.proc = subprocess.Popen(
            [sys.executable, "-P", str(HERE / "soak_sampler.py"), str(self.out),
             node.exporter_url, str(node.daemons[-1].proc.pid), *pids],
            env=node.env, cwd=node.root,
        )  # fmt: skip

    def finish(self, done_at: list[float]) -> Series:
        """Stop it; its series, each sample with the lifecycles done by then."""
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=30)
        found = json.loads(self.out.read_text())
        starts = [row[0] for rows in found["daemons"].values() for row in rows[:1]]
        starts += [row[0] for row in found["scrapes"][:1]]
        t0 = min(starts, default=0.0)
        series = Series()
        for name, rows in found["daemons"].items():
            series.daemons[name] = [
                Sample(t - t0, bisect.bisect_right(done_at, t), int(rss), int(fds), int(threads))
                for t, rss, fds, threads in rows
            ]
        for t, wall, cpu, queued, collect in found["scrapes"]:
            series.scrape_times.append(t - t0)
            series.scrapes_ms.append(wall)
            series.cpu_ms.append(cpu)
            series.queued_ms.append(queued)
            series.collect_ms.append(collect)
        series.scrape_failures = found["failures"]
        return series


def drive(node: Node, todo: list[Plan], workers: int, done_at: list[float]) -> dict[str, Any]:
    """Run the lifecycles; counts, durations and the first failures."""
    pool, pods = DevicePool(node.dp_devices), PodList(node)
    reaper = Reaper(pool)
    reaper.start()
    failures: list[str] = []
    durations: dict[str, list[float]] = {}
    done = 0
    with futures.ThreadPoolExecutor(workers) as executor:
        running = {executor.submit(run_one, node, plan, pool, pods, reaper): plan for plan in todo}
        for future in futures.as_completed(running):
            plan = running[future]
            try:
                durations.setdefault(plan.kind, []).append(future.result())
            except Exception as exc:  # LifecycleError, or a call that failed
                failures.append(f"#{plan.number} {plan.kind}: {exc}")
                if len(failures) >= MAX_FAILURES:
                    for other in running:
                        other.cancel()
            done += 1
            done_at.append(time.time())
    wait_for(lambda: not reaper.pending(), "the device plugin's clean-up", 120)
    failures += reaper.failures
    return {
        "done": done,
        "failed": len(failures),
        "dp_dirs_removed_by_cleanup": reaper.removed,
        "killed": sum(p.kill for p in todo),
        "by_kind": {kind: len(d) for kind, d in durations.items()},
        "seconds_by_kind": {kind: percentiles(d) for kind, d in durations.items()},
        "failures": failures,
    }


def host_mounts() -> int:
    """How many mounts the host's mount namespace has (the hook must never add one)."""
    with open("/proc/self/mountinfo") as info:
        return sum(1 for _ in info)


def final_view(url: str) -> dict[str, Any]:
    """What the exporter shows once every lifecycle is over."""
    used, containers = 0.0, 0
    for family in text_string_to_metric_families(scrape(url)):
        for s in family.samples:
            if s.name == "cgpu_gpu_memory_used_bytes":
                used += s.value
            elif s.name == "cgpu_container_gpu_memory_used_bytes":
                containers += 1
    return {"gpu_memory_used_bytes": int(used), "container_series": containers}


def soak(lifecycles: int, seed: int, workers: int, keep: bool) -> dict[str, Any]:
    """Run the whole soak; the report (without the verdict)."""
    root = Path(tempfile.mkdtemp(prefix="cgsoak-", dir="/tmp"))
    mounts = host_mounts()
    node = start_node(root)
    done_at: list[float] = []
    sampler: Sampler | None = None
    try:
        # The exporter's first scrape initialises NVML and its caches once: timed on its own,
        # and out of the series (Prometheus has scraped a running exporter long before).
        begin = time.perf_counter()
        scrape(node.exporter_url)
        first_scrape_ms = (time.perf_counter() - begin) * 1e3
        sampler = Sampler(node)
        time.sleep(1.0)  # a sample before the first lifecycle
        began = time.monotonic()
        life = drive(node, plans(lifecycles, seed), workers, done_at)
        seconds = time.monotonic() - began
        time.sleep(2.0)  # two more samples after the last lifecycle
        series = sampler.finish(done_at)
        final = final_view(node.exporter_url)
        left = leftovers(node.state_dir, node.cdi_dir)
        dead = [d.name for d in node.daemons if not d.alive()]
        mounts_added = host_mounts() - mounts
    finally:
        if sampler is not None and sampler.proc.poll() is None:
            sampler.proc.kill()
        statuses = node.close()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    return {
        "lifecycles": life,
        "seed": seed,
        "workers": workers,
        "seconds": seconds,
        "daemons": {
            name: {
                "rss_kib": growth(samples, "rss_kib"),
                "fds": growth(samples, "fds"),
                "threads": growth(samples, "threads"),
                # [seconds, lifecycles done, RSS KiB, fds, threads]
                "series": [[round(s.t, 1), s.done, s.rss_kib, s.fds, s.threads] for s in samples],
            }
            for name, samples in series.daemons.items()
        },
        "daemons_died": dead,
        "exit_statuses": dict(statuses),
        "scrapes": len(series.scrapes_ms),
        "first_scrape_ms": first_scrape_ms,
        "scrape_ms": percentiles(series.scrapes_ms),
        "exporter_collect_ms": percentiles(series.collect_ms),
        "exporter_cpu_ms": percentiles(series.cpu_ms),
        "exporter_queued_ms": percentiles(series.queued_ms),
        "scrape_failures": series.scrape_failures[:20],
        # [seconds, wall ms, the exporter's CPU ms, its wait for a CPU ms, its collect ms]
        "scrape_series": [
            [round(t, 1), round(ms, 2), round(cpu, 2), round(queued, 2), round(collect, 2)]
            for t, ms, cpu, queued, collect in zip(
                series.scrape_times,
                series.scrapes_ms,
                series.cpu_ms,
                series.queued_ms,
                series.collect_ms,
                strict=True,
            )
        ],
        "host_mounts_added": mounts_added,
        "leftovers": left,
        "final": final,
        "root": str(root) if keep else None,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def main() -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--lifecycles", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=3, help="lifecycles at a time")
    parser.add_argument("--max-growth", type=float, default=0.05)
    parser.add_argument("--max-scrape-p99-ms", type=float, default=100.0)
    parser.add_argument("--json", type=Path, help="write the full report (with series) here")
    parser.add_argument("--keep", action="store_true", help="keep the node's directory")
    args = parser.parse_args()
    report = soak(args.lifecycles, args.seed, args.workers, args.keep)
    report["slow_scrapes"] = slow_scrapes(report["scrape_series"], args.max_scrape_p99_ms)
    report["verdict"] = verdict(report, args.max_growth, args.max_scrape_p99_ms)
    if report["daemons_died"]:
        report["verdict"]["daemons_alive"] = False
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(table(report))
    for failure in report["lifecycles"]["failures"]:
        print("  " + failure)
    return 0 if all(report["verdict"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
