"""`cgpu exporter` as a real process on a loopback port, and reading its /metrics over HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

import cgpu

Series = dict[str, dict[frozenset[tuple[str, str]], float]]


def python_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with PYTHONPATH set so that child Pythons import the cgpu the tests import."""
    out = dict(env)
    site = str(Path(cgpu.__file__).resolve().parents[1])
    out["PYTHONPATH"] = os.pathsep.join(p for p in (site, env.get("PYTHONPATH", "")) if p)
    if os.environ.get("CGPU_NATIVE_DIR"):
        out["CGPU_NATIVE_DIR"] = os.environ["CGPU_NATIVE_DIR"]
    return out


class Exporter:
    """`cgpu exporter --port 0` on 127.0.0.1 with extra options; stopped with SIGTERM."""

    def __init__(self, state_dir: Path, log: Path, env: dict[str, str], *options: str) -> None:
        self.log = log
        self.proc = subprocess.Popen(
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
                str(log.parent / "no-kubelet.sock"),
                "--nvml-retry",
                "1",
                *options,
            ],
            env=python_env(env),
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            stdin=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "serving http://127.0.0.1:" in line, (line, log.read_text())
        self.url = "http://" + line.split("http://")[1].strip()

    def get(self, timeout: float = 10.0) -> tuple[int, str]:
        """One scrape: (HTTP status, body)."""
        try:
            with urllib.request.urlopen(self.url, timeout=timeout) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(errors="replace")

    def scrape(self) -> Series:
        """One scrape parsed as Prometheus parses it; fails unless the status is 200."""
        status, body = self.get()
        assert status == 200, body[-2000:]
        out: Series = {}
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                out.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
        return out

    def stop(self) -> int:
        """SIGTERM, and the exit status (the exporter must still be alive to get 0)."""
        alive = self.proc.poll() is None
        if alive:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(10)
        return code if alive else -abs(code) - 1000
