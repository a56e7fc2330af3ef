"""End to end: processes under the shim and the simulator, `cgpu exporter`, a real Prometheus.

Everything listens on 127.0.0.1 only. Prometheus scrapes every second and loads
deploy/prometheus/alerts.yaml, so the rules are checked by the real server too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from exporter_helpers import MIB, dashboard_targets

import cgpu

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus")
UUIDS = ["GPU-e2e00000-0000-4000-8000-000000000000", "GPU-e2e00000-0000-4000-8000-000000000001"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        PROMETHEUS is None, reason="prometheus is not installed (apt-get install prometheus)"
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(what: str, check: Callable[[], Any], timeout: float = 20.0) -> Any:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except OSError as exc:  # not listening yet
            last = exc
        else:
            if last:
                return last
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what} (last: {last!r})")


class Prometheus:
    """A Prometheus server on loopback, scraping one target every second."""

    def __init__(self, tmp: Path, target: str) -> None:
        config = tmp / "prometheus.yml"
        config.write_text(
            json.dumps(
                {
                    "global": {
                        "scrape_interval": "1s",
                        "scrape_timeout": "1s",
                        "evaluation_interval": "1s",
                    },
                    "rule_files": [str(REPO / "deploy" / "prometheus" / "alerts.yaml")],
                    "scrape_configs": [
                        {
                            "job_name": "cgpu-exporter",
                            "honor_labels": True,
                            "static_configs": [
                                {"targets": [target], "labels": {"node": "test-node"}}
                            ],
                        }
                    ],
                }
            )
        )
        self.log = tmp / "prometheus.log"
        self.tsdb = tmp / "tsdb"
        # The port is picked before Prometheus binds it, so another program on this machine may
        # take it first: then Prometheus exits (or someone else answers), and we try another.
        for _ in range(5):
            self.port = _free_port()
            self.proc = subprocess.Popen(
                [
                    str(PROMETHEUS),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.tsdb}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=self.log.open("w"),
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            if _wait_for("Prometheus to be ready", self._ready) == "ours":
                return
            self.stop()
        pytest.fail(f"Prometheus did not start:\n{self.log.read_text()}")

    def _ready(self) -> str:
        if self.proc.poll() is not None:
            return "exited"
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
            if r.status != 200:
                return ""
        flags = self.api("status/flags")
        return "ours" if flags.get("storage.tsdb.path") == str(self.tsdb) else "someone else"

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{query}"
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> dict[frozenset[tuple[str, str]], float]:
        """An instant query: {labels without __name__/job/instance/node: value}."""
        result = self.api("query", query=expr)["result"]
        drop = {"__name__", "job", "instance", "node"}
        return {
            frozenset((k, v) for k, v in s["metric"].items() if k not in drop): float(s["value"][1])
            for s in result
        }

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Workload:
    """workload.c: allocates, prints `ready`, and holds the memory until stdin closes."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.kill()
            pytest.fail(f"workload did not start: {self.proc.stderr.read()}")

    def finish(self) -> None:
        """Close stdin: the workload frees its memory and exits normally."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(20)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(20)


@pytest.fixture
def e2e_env(sim_env: Callable[..., dict[str, str]]) -> dict[str, str]:
    """Two simulated 16 GiB GPUs shared by every process of the test."""
    env = sim_env(devices=2, uuids=",".join(UUIDS), memory="16GiB")
    if os.environ.get("CGPU_NATIVE_DIR"):
        env["CGPU_NATIVE_DIR"] = os.environ["CGPU_NATIVE_DIR"]
    # Run the same cgpu package the tests import.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(cgpu.__file__).resolve().parents[1]), env.get("PYTHONPATH", "")) if p
    )
    return env


@pytest.fixture
def exporter(tmp_path: Path, e2e_env: dict[str, str], state_dir: Path) -> Iterator[str]:
    """`cgpu exporter` on a free loopback port; yields host:port."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cgpu.cli",
            "exporter",
            "--address",
            "127.0.0.1",
            "--port",
            "0",
            "--state-dir",
            str(state_dir),
            "--pod-resources-socket",
            str(tmp_path / "no-kubelet.sock"),
            "--nvml-retry",
            "1",
        ],
        env=e2e_env,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "exporter.log").open("w"),
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "serving http://127.0.0.1:" in line, (line, (tmp_path / "exporter.log").read_text())
    yield line.split("http://")[1].split("/")[0]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0


@pytest.fixture
def prometheus(tmp_path: Path, exporter: str) -> Iterator[Prometheus]:
    prom_dir = tmp_path / "prom"
    prom_dir.mkdir()
    server = Prometheus(prom_dir, exporter)
    yield server
    server.stop()


def _labels(**kv: str) -> frozenset[tuple[str, str]]:
    return frozenset(kv.items())


def test_prometheus_sees_slices_use_and_exits(
    prometheus: Prometheus,
    e2e_env: dict[str, str],
    state_dir: Path,
    make_container: Callable[..., Path],
    workload: Path,
    shim: Path,
) -> None:

    # A pod's container, as the device plugin makes it: labels in meta.json, slice on GPU 0.
    pod_dir = make_container(
        "alloc-1",
        {UUIDS[0]: 512 * MIB},
        namespace="team-a",
        pod="trainer-0",
        container="main",
        device_ids=["dev-1"],
    )
    with open(pod_dir / "cgpu.conf", "a") as conf:
        conf.write(f"compute {UUIDS[0]} 50\n")  # and half of the GPU's compute
    # As in a real container, the pod sees only its own GPU.
    pod_env = {
        **e2e_env,
        "LD_PRELOAD": str(shim),
        "CGPU_LEDGER_DIR": str(pod_dir),
        "CUDA_VISIBLE_DEVICES": UUIDS[0],
    }
    first = Workload([str(workload), "300"], pod_env)
    second = Workload([str(workload), "200"], pod_env)

    # A `cgpu run` container: 1 GiB on each GPU, 256 MiB used on GPU 0. --keep leaves its
    # directory after the command exits, so its series stay, at 0 used.
    run = Workload(
        [
            sys.executable,
            "-m",
            "cgpu.cli",
            "run",
            "--state-dir",
            str(state_dir),
            "--gpu-mem",
            "1GiB",
            "--simulate",
            "--keep",
            "--",
            str(workload),
            "256",
        ],
        e2e_env,
    )

    pod = {"namespace": "team-a", "pod": "trainer-0", "container": "main"}
    pod0 = _labels(**pod, gpu_uuid=UUIDS[0], gpu_index="0")

    def used_of_pod() -> dict:
        got = prometheus.query('cgpu_container_gpu_memory_used_bytes{pod="trainer-0"}')
        return got if got.get(pod0) == 500 * MIB else {}

    assert _wait_for("the pod's use in Prometheus", used_of_pod) == {pod0: 500 * MIB}
    assert prometheus.query('cgpu_container_gpu_memory_limit_bytes{pod="trainer-0"}') == {
        pod0: 512 * MIB
    }
    assert prometheus.query('cgpu_container_gpu_processes{pod="trainer-0"}') == {pod0: 2}

    run_used = prometheus.query('cgpu_container_gpu_memory_used_bytes{container=~"run-.*"}')
    run_key = next(iter(run_used))
    run_name = dict(run_key)["container"]
    assert {dict(k)["gpu_index"]: v for k, v in run_used.items()} == {"0": 256 * MIB, "1": 0}
    run_limit = prometheus.query(f'cgpu_container_gpu_memory_limit_bytes{{container="{run_name}"}}')
    assert sorted(run_limit.values()) == [1 << 30, 1 << 30]

    # GPU-level series: NVML (the simulator) and the sum of slices.
    totals = prometheus.query("cgpu_gpu_memory_total_bytes")
    assert sorted(totals.values()) == [16 << 30, 16 << 30]
    assert all(dict(k)["model"] for k in totals)
    # NVML's used is the whole GPU's: the slices' 756 MiB, plus a process outside any slice.
    outsider = Workload([str(workload), "64"], e2e_env)
    _wait_for(
        "NVML's used memory",
        lambda: (
            next(iter(prometheus.query('cgpu_gpu_memory_used_bytes{gpu_index="0"}').values()))
            >= (756 + 64) * MIB
        ),
    )
    outsider.finish()
    allocated = prometheus.query("cgpu_gpu_memory_allocated_bytes")
    assert allocated[_labels(gpu_uuid=UUIDS[0], gpu_index="0")] == 512 * MIB + (1 << 30)
    assert prometheus.query("cgpu_gpu_containers")[_labels(gpu_uuid=UUIDS[1], gpu_index="1")] == 1

    # The pod is at 97.7% of its slice: the rule in alerts.yaml is pending (for: 2m).
    def slice_alert() -> list:
        alerts = prometheus.api("alerts")["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == "CgpuContainerNearSliceLimit"]

    alert = _wait_for("the near-slice alert", slice_alert)
    assert alert[0]["labels"]["pod"] == "trainer-0" and alert[0]["state"] in ("pending", "firing")

    # Every query of the Grafana dashboard runs on this Prometheus, and finds data.
    for title, expr in dashboard_targets():
        expr = expr.replace("$node", ".*").replace("$namespace", ".*")
        result = prometheus.api("query", query=expr)["result"]
        if "Skipped" not in title and "Unhealthy" not in title:
            assert result, f"{title}: {expr} returned nothing"

    # A SIGKILLed process stops counting at once; a normal exit too.
    first.kill()
    _wait_for(
        "the killed process's memory to leave the pod",
        lambda: (
            prometheus.query('cgpu_container_gpu_memory_used_bytes{pod="trainer-0"}')
            == {pod0: 200 * MIB}
        ),
    )
    second.finish()
    run.finish()
    assert run.proc.returncode == 0

    def all_zero() -> bool:
        used = prometheus.query("cgpu_container_gpu_memory_used_bytes")
        return len(used) == 3 and all(v == 0 for v in used.values())

    _wait_for("every container's use to drop to 0", all_zero)
    assert all(v == 0 for v in prometheus.query("cgpu_container_gpu_processes").values())
    assert prometheus.query('cgpu_container_gpu_memory_limit_bytes{pod="trainer-0"}') == {
        pod0: 512 * MIB
    }

    # The container directory goes: its series go too (Prometheus marks them stale).
    shutil.rmtree(pod_dir)
    _wait_for(
        "the removed container's series to vanish",
        lambda: prometheus.query('cgpu_container_gpu_memory_limit_bytes{pod="trainer-0"}') == {},
    )
    assert prometheus.query("up") and all(v == 1 for v in prometheus.query("up").values())


def test_corrupt_ledger_is_counted_in_prometheus(
    prometheus: Prometheus, make_container: Callable[..., Path]
) -> None:
    good = make_container("good", {UUIDS[0]: 1 << 30}, namespace="ns", pod="good", container="c")
    bad = make_container("bad", {UUIDS[0]: 1 << 30}, namespace="ns", pod="bad", container="c")
    (bad / "cgpu.ledger").write_bytes(b"\x00garbage" * 100)
    assert good.is_dir()

    def counted() -> bool:
        skipped = prometheus.query('cgpu_ledgers_skipped{reason="foreign"}')
        return list(skipped.values()) == [1]

    _wait_for("the corrupt ledger to be counted", counted)
    limits = prometheus.query("cgpu_container_gpu_memory_limit_bytes")
    assert {dict(k)["pod"] for k in limits} == {"good"}
    errors = prometheus.query('cgpu_ledger_errors_total{reason="foreign"}')
    assert next(iter(errors.values())) >= 1


def test_prometheus_sees_the_compute_host_view(
    prometheus: Prometheus, state_dir: Path, make_container: Callable[..., Path]
) -> None:
    """The compute arbiter's status file (kept fresh here, as the arbiter rewrites it every
    second) reaches Prometheus as the host view's three families."""
    import threading

    from cgpu.core.computestatus import status_path

    directory = make_container(
        "capped", {UUIDS[0]: 1 << 30}, namespace="ns", pod="p", container="c"
    )
    with open(directory / "cgpu.conf", "a") as conf:
        conf.write(f"compute {UUIDS[0]} 30 fixed\n")
    entry = {"limit": 30, "policy": "fixed", "share_percent": 29.5, "host_percent": 41.25,
             "out_of_turn_s": 3.5, "over_compute": True}  # fmt: skip
    stop = threading.Event()

    def keep_fresh() -> None:
        path = status_path(state_dir)
        while not stop.is_set():
            gpu = {"host_view": True, "containers": {str(directory): entry}}
            path.with_name(".s").write_text(
                json.dumps({"time": time.time(), "gpus": {UUIDS[0]: gpu}})
            )
            os.replace(path.with_name(".s"), path)
            stop.wait(0.5)

    writer = threading.Thread(target=keep_fresh, daemon=True)
    writer.start()
    try:
        series = _labels(namespace="ns", pod="p", container="c", gpu_uuid=UUIDS[0], gpu_index="0")
        got = _wait_for(
            "the host view in Prometheus",
            lambda: prometheus.query("cgpu_container_gpu_compute_host_percent"),
        )
        assert got == {series: 41.25}
        assert prometheus.query("cgpu_container_gpu_compute_out_of_turn_seconds_total") == {
            series: 3.5
        }
        assert prometheus.query("cgpu_container_over_compute") == {series: 1}
        assert prometheus.query("cgpu_container_gpu_compute_used_percent") == {series: 29.5}
        assert list(prometheus.query("cgpu_exporter_compute_status_up").values()) == [1]
    finally:
        stop.set()
        writer.join(timeout=5)
