"""The soak's measurements and verdict: daemon samples, scrapes, leftovers, criteria."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Sample:
    """One look at one daemon: seconds since the start, lifecycles done, RSS, open fds."""

    t: float
    done: int
    rss_kib: int
    fds: int
    threads: int


def sample(pid: int, t: float, done: int) -> Sample | None:
    """RSS (VmRSS), open file descriptors and threads of `pid` from /proc; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            fields = dict(line.split(":", 1) for line in status if ":" in line)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        return Sample(t, done, int(fields["VmRSS"].split()[0]), fds, int(fields["Threads"]))
    except (OSError, KeyError, ValueError):
        return None


def schedstat(pid: int) -> tuple[int, int]:
    """Nanoseconds `pid`'s threads have run on a CPU, and waited on a run queue for one."""
    ran = waited = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as stat:
                fields = stat.read().split()
        except OSError:
            continue  # a thread that just ended
        ran, waited = ran + int(fields[0]), waited + int(fields[1])
    return ran, waited


@dataclass
class Series:
    """Everything sampled during the run."""

    daemons: dict[str, list[Sample]] = field(default_factory=dict)
    scrapes_ms: list[float] = field(default_factory=list)
    scrape_times: list[float] = field(default_factory=list)  # seconds since the start
    collect_ms: list[float] = field(default_factory=list)  # the exporter's own figure
    cpu_ms: list[float] = field(default_factory=list)  # the exporter's CPU time per scrape
    queued_ms: list[float] = field(default_factory=list)  # its wait for a CPU per scrape
    scrape_failures: list[str] = field(default_factory=list)


def _window(values: list[int], start: float, end: float, floor: bool) -> float:
    """The samples from fraction `start` to `end` of the run (at least 3): their median, or
    (`floor`) their minimum."""
    n = len(values)
    lo = int(n * start)
    chosen = values[lo : min(max(int(n * end), lo + 3), n)]
    return float(min(chosen) if floor else statistics.median(chosen))


def growth(samples: list[Sample], attr: str) -> dict[str, float]:
    """A series' level at mid-run (45-55% of the samples) and at the end (the last 10%), and
    the growth between them: what the second half added after the first half's warm-up.

    RSS is taken as the window's median. Descriptors and threads as its minimum: a daemon
    holds some for a moment (a connection per clean-up pass, a scrape's socket), and a leak
    raises the floor, not the odd sample.
    """
    values = [getattr(s, attr) for s in samples]
    if len(values) < 10:
        return {"mid": float("nan"), "end": float("nan"), "growth": float("nan")}
    floor = attr != "rss_kib"
    mid, end = _window(values, 0.45, 0.55, floor), _window(values, 0.90, 1.0, floor)
    return {"mid": mid, "end": end, "growth": (end - mid) / mid if mid else float("inf")}


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50, p95, p99 and max, in the samples' unit."""
    if not samples:
        return {"p50": float("nan"), "p95": float("nan"), "p99": float("nan"), "max": float("nan")}
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p50": at(0.50), "p95": at(0.95), "p99": at(0.99), "max": ordered[-1]}


def slow_scrapes(rows: list[list[float]], limit_ms: float) -> dict[str, float]:
    """The scrapes over `limit_ms`, and how many of them the exporter spent mostly (over half
    the scrape) waiting for a CPU: the machine's load, not the exporter's work."""
    slow = [r for r in rows if r[1] > limit_ms]
    return {
        "count": len(slow),
        "mostly_waiting_for_cpu": sum(1 for r in slow if r[3] > r[1] / 2),
        "max_cpu_ms": max((r[2] for r in slow), default=0.0),
    }


def leftovers(state_dir: Path, cdi_dir: Path) -> dict[str, list[str]]:
    """Container directories, ledgers and CDI specs still on disk, and claims the DRA driver's
    checkpoint still holds."""
    import json

    containers = state_dir / "containers"
    dirs = sorted(p.name for p in containers.iterdir()) if containers.is_dir() else []
    ledgers = sorted(str(p.relative_to(state_dir)) for p in state_dir.rglob("*.ledger"))
    specs = sorted(p.name for p in cdi_dir.glob("*.json")) if cdi_dir.is_dir() else []
    checkpoint = state_dir / "dra" / "checkpoint.json"
    claims = []
    if checkpoint.is_file():
        claims = sorted(json.loads(checkpoint.read_text()).get("claims") or {})
    return {"container_dirs": dirs, "ledgers": ledgers, "cdi_specs": specs, "dra_claims": claims}


def verdict(report: dict[str, Any], max_growth: float, max_p99_ms: float) -> dict[str, bool]:
    """The four criteria, each true when met."""
    flat = all(
        report["daemons"][name][what]["growth"] <= max_growth
        for name in report["daemons"]
        for what in ("rss_kib", "fds", "threads")
    )
    return {
        "flat_after_warmup": flat,
        "no_leftovers": not any(report["leftovers"].values()) and report["host_mounts_added"] == 0,
        "ledger_totals_exact": report["lifecycles"]["failed"] == 0
        and report["final"]["gpu_memory_used_bytes"] == 0
        and report["final"]["container_series"] == 0,
        "scrape_p99": report["scrape_ms"]["p99"] <= max_p99_ms and not report["scrape_failures"],
    }


def table(report: dict[str, Any]) -> str:
    """The human summary."""
    life = report["lifecycles"]
    lines = [
        f"{life['done']} lifecycles ({life['killed']} SIGKILLed) in {report['seconds']:.0f} s: "
        + ", ".join(f"{k} {v}" for k, v in life["by_kind"].items())
        + f"; {life['failed']} failed",
        "",
        f"{'daemon':15s} {'RSS mid MiB':>11s} {'RSS end MiB':>11s} {'growth':>7s} "
        f"{'fds mid':>7s} {'fds end':>7s} {'growth':>7s} {'threads':>7s} {'growth':>7s}",
    ]
    for name, d in report["daemons"].items():
        rss, fds, threads = d["rss_kib"], d["fds"], d["threads"]
        lines.append(
            f"{name:15s} {rss['mid'] / 1024:11.1f} {rss['end'] / 1024:11.1f} "
            f"{rss['growth'] * 100:6.1f}% {fds['mid']:7.0f} {fds['end']:7.0f} "
            f"{fds['growth'] * 100:6.1f}% {threads['end']:7.0f} {threads['growth'] * 100:6.1f}%"
        )
    s, c = report["scrape_ms"], report["exporter_collect_ms"]
    u, q = report["exporter_cpu_ms"], report["exporter_queued_ms"]
    w = report["slow_scrapes"]
    lines += [
        "",
        f"scrapes: {report['scrapes']} (failed {len(report['scrape_failures'])}); "
        f"p50 {s['p50']:.1f} ms, p95 {s['p95']:.1f} ms, p99 {s['p99']:.1f} ms, "
        f"max {s['max']:.1f} ms (first scrape, not in the series: "
        f"{report['first_scrape_ms']:.1f} ms)",
        f"the exporter's own collect time: p50 {c['p50']:.1f} ms, p99 {c['p99']:.1f} ms; "
        f"its CPU time per scrape: p50 {u['p50']:.1f} ms, p99 {u['p99']:.1f} ms; "
        f"its wait for a CPU: p50 {q['p50']:.1f} ms, p99 {q['p99']:.1f} ms",
        f"scrapes over the limit: {w['count']}, {w['mostly_waiting_for_cpu']} of them mostly "
        f"waiting for a CPU; the most CPU one took {w['max_cpu_ms']:.1f} ms",
        "leftovers: "
        + ", ".join(f"{k} {len(v)}" for k, v in report["leftovers"].items())
        + f", host mounts {report['host_mounts_added']}",
        f"final: GPU memory used {report['final']['gpu_memory_used_bytes']} B, "
        f"container series {report['final']['container_series']}",
        "",
    ]
    lines += [f"{name:22s} {'ok' if ok else 'FAILED'}" for name, ok in report["verdict"].items()]
    return "\n".join(lines)
