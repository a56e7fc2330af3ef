"""`cgpu webhook` under load: admission latency at a fixed request rate, and its memory.

Starts `cgpu webhook` as its own process, pinned to one core (taskset), against the test
suite's fake API server (tests/kube), and sends AdmissionReviews over HTTPS at a fixed rate
(open loop: each request leaves at its scheduled time, whatever the last one took) from a few
keep-alive connections, as the API server does. Pods come in several shapes; a share of them
(--new-namespace-share) land in a namespace never seen before, so their template is written to
the API server inside the request: template writes are included in the figures.

    python benchmarks/webhook_latency.py [--rate 200] [--seconds 30] [--new-namespace-share 0.1]

Latency is measured at the client, from the scheduled send time to the whole answer read. It
exits non-zero when a target is missed: p99 <= 10 ms, peak RSS <= 80 MiB.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "webhook"))

from kube.apiserver import FakeApiServer  # noqa: E402
from webhook_helpers import make_cert, pod_from_models, review  # noqa: E402

SHAPES = [
    ({"aliyun.com/gpu-mem": "4"}, None),
    ({"aliyun.com/gpu-mem": "2", "aliyun.com/gpu-core.percentage": "30"}, None),
    ({"aliyun.com/gpu-mem": "8"}, {"aliyun.com/gpu-count": "4"}),
    ({"volcano.sh/gpu-memory": "1024"}, None),
]


def bodies(count: int, new_share: float) -> list[bytes]:
    """`count` review bodies, prepared before the clock starts."""
    out = []
    every = int(1 / new_share) if new_share > 0 else 0
    for i in range(count):
        limits, labels = SHAPES[i % len(SHAPES)]
        pod = pod_from_models(f"bench-{i}", [{"name": "main", "limits": limits}], labels)
        if every and i % every == 0:
            pod["metadata"]["namespace"] = f"ns-{i}"
        out.append(json.dumps(review(pod)).encode())
    return out


def wait_ready(port: int, context: ssl.SSLContext, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("the webhook did not start")


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


def run_load(
    port: int, context: ssl.SSLContext, reviews: list[bytes], rate: float, connections: int
) -> list[float]:
    """Open-loop load: request i leaves at start + i / rate; returns latencies in seconds."""
    latencies: list[float] = [0.0] * len(reviews)
    failures: list[str] = []
    start = time.perf_counter() + 0.2

    def worker(k: int) -> None:
        conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
        for i in range(k, len(reviews), connections):
            due = start + i / rate
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            conn.request("POST", "/mutate-pods", reviews[i], {"Content-Type": "application/json"})
            response = conn.getresponse()
            body = response.read()
            latencies[i] = time.perf_counter() - due
            if response.status != 200 or b'"allowed": true' not in body:
                failures.append(body[:200].decode(errors="replace"))
        conn.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise SystemExit(f"{len(failures)} requests failed, first: {failures[0]}")
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--new-namespace-share", type=float, default=0.1)
    parser.add_argument("--core", default="0", help="the core the webhook is pinned to")
    args = parser.parse_args()

    api = FakeApiServer()
    work = Path(tempfile.mkdtemp(prefix="cgpu-webhook-bench-"))
    make_cert(work / "certs")
    kubeconfig = api.kubeconfig(work / "kubeconfig")
    port = 20000 + os.getpid() % 20000
    cgpu = shutil.which("cgpu", path=str(Path(sys.executable).parent)) or "cgpu"
    command = [
        cgpu,
        "webhook",
        "--cert-dir",
        str(work / "certs"),
        "--port",
        str(port),
        "--address",
        "127.0.0.1",
        "--kubeconfig",
        str(kubeconfig),
        "--log-level",
        "WARNING",
    ]
    if shutil.which("taskset"):
        command = ["taskset", "-c", args.core, *command]
    server = subprocess.Popen(command)
    try:
        context = ssl.create_default_context(cafile=str(work / "certs" / "tls.crt"))
        wait_ready(port, context)
        warm = bodies(200, 0.0)
        run_load(port, context, warm, args.rate, args.connections)  # warm: code paths, templates
        count = int(args.rate * args.seconds)
        reviews = bodies(count, args.new_namespace_share)
        cpu0 = os.times()
        latencies = run_load(port, context, reviews, args.rate, args.connections)
        del cpu0
        rss, hwm = rss_kib(server.pid)
    finally:
        server.terminate()
        server.wait(10)
        api.close()
        shutil.rmtree(work, ignore_errors=True)
    ordered = sorted(latencies)
    p50 = statistics.median(ordered) * 1e3
    p99 = ordered[int(len(ordered) * 0.99) - 1] * 1e3
    written = len({t for t in range(count) if args.new_namespace_share and
                   t % int(1 / args.new_namespace_share) == 0})  # fmt: skip
    result = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "rate_per_s": args.rate,
        "requests": count,
        "template_writes": written,
        "p50_ms": round(p50, 2),
        "p99_ms": round(p99, 2),
        "max_ms": round(ordered[-1] * 1e3, 2),
        "rss_mib": round(rss / 1024, 1),
        "peak_rss_mib": round(hwm / 1024, 1),
    }
    print(json.dumps(result, indent=1))
    ok = p99 <= 10.0 and hwm <= 80 * 1024
    print("PASS" if ok else "FAIL: targets are p99 <= 10 ms and peak RSS <= 80 MiB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
