"""The soak's observer, in a process of its own as Prometheus is: once a second it samples each
daemon's RSS, descriptors and threads from /proc, then scrapes the exporter over HTTP and times
it (wall clock, and the exporter's own CPU time and wait for a CPU over the scrape).

    python benchmarks/soak_sampler.py OUT URL EXPORTER_PID NAME=PID...

On SIGTERM it writes OUT (JSON): {"daemons": {name: [[unix time, rss KiB, fds, threads]]},
"scrapes": [[unix time, wall ms, CPU ms, queued ms, collect ms]], "failures": [...]}.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from soak_report import sample, schedstat

# The exporter's own account of a scrape: reading ledgers, NVML and pod-resources.
COLLECT_RE = re.compile(r"^cgpu_exporter_scrape_duration_seconds (\S+)$", re.MULTILINE)


def scrape(url: str) -> str:
    """One scrape's body; raises on anything but 200."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.read().decode()


def observe(url: str, exporter: int, pids: dict[str, int], stop: threading.Event) -> dict[str, Any]:
    """Sample and scrape once a second until `stop`."""
    daemons: dict[str, list[list[float]]] = {name: [] for name in pids}
    scrapes: list[list[float]] = []
    failures: list[str] = []
    while not stop.is_set():
        tick, now = time.monotonic(), time.time()
        for name, pid in pids.items():
            found = sample(pid, now, 0)
            if found is not None:
                daemons[name].append([now, found.rss_kib, found.fds, found.threads])
        ran, waited = schedstat(exporter)
        begin = time.perf_counter()
        try:
            body = scrape(url)
            wall = (time.perf_counter() - begin) * 1e3
            ran_after, waited_after = schedstat(exporter)
            collect = COLLECT_RE.search(body)
            scrapes.append([
                now, wall, (ran_after - ran) / 1e6, (waited_after - waited) / 1e6,
                float(collect.group(1)) * 1e3 if collect else float("nan"),
            ])  # fmt: skip
        except Exception as exc:  # a failed scrape is a finding, not the end of the soak
            failures.append(f"{time.strftime('%H:%M:%S')}: {exc}")
        stop.wait(max(0.0, 1.0 - (time.monotonic() - tick)))
    return {"daemons": daemons, "scrapes": scrapes, "failures": failures}


def main() -> int:
    """Observe until SIGTERM, then write the series."""
    out, url, exporter = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    pids = {name: int(pid) for name, pid in (a.split("=", 1) for a in sys.argv[4:])}
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    found = observe(url, exporter, pids, stop)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(found))
    tmp.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
