"""`cgpu exporter` as a process: it starts with nothing (no GPU, no kubelet, no state dir)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

import cgpu


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(cgpu.__file__).resolve().parents[1]), env.get("PYTHONPATH", "")) if p
    )
    return env


def _start(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable, "-m", "cgpu.cli", "exporter",
            "--state-dir", str(tmp_path / "no-state"),
            "--pod-resources-socket", str(tmp_path / "no-kubelet.sock"),
            *extra,
        ],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip


def test_serves_metrics_and_health_with_nothing_there(tmp_path: Path) -> None:
    proc = _start(tmp_path, "--address", "127.0.0.1", "--port", "0")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "serving http://127.0.0.1:" in line, proc.stderr.read() if proc.stderr else ""
        base = line.split("serving ")[1].strip().removesuffix("/metrics")
        for _ in range(2):  # twice: the second scrape must not fail either
            with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
                text = r.read().decode()
            assert r.status == 200
            assert "cgpu_exporter_scrape_duration_seconds" in text
            assert 'cgpu_ledger_errors_total{reason="corrupt"} 0.0' in text
            assert "cgpu_exporter_pod_resources_up 0.0" in text
            assert "process_resident_memory_bytes" in text
        with urllib.request.urlopen(f"{base}/healthz", timeout=10) as r:
            assert r.read() == b"ok\n"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _start(tmp_path, "--address", "127.0.0.1", "--port", str(port))
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in err


@pytest.mark.parametrize("option", ["--port", "--address", "--state-dir", "--pod-resources-socket"])
def test_help_lists_options(option: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "cgpu.cli", "exporter", "--help"],
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert option in out
