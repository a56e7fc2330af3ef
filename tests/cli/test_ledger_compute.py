"""`cgpu ledger` shows the host's view of compute (the arbiter's status file) beside the
ledger's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from cgpu.core.computestatus import status_path
from cgpu.core.containers import create_container_dir

UUID = "GPU-5eed0000-0000-4000-8000-000000000000"
OTHER = "GPU-5eed0000-0000-4000-8000-000000000001"
FIGURES = {
    "limit": 30,
    "policy": "fixed",
    "priority": "normal",
    "share_percent": 29.5,
    "charged_ns": 1,
    "forced_revokes": 0,
    "host_percent": 41.25,
    "out_of_turn_s": 3.5,
    "over_compute": True,
}


def _ledger(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cgpu.cli", "ledger", *map(str, args)],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _containers(state: Path) -> tuple[Path, Path]:
    meta = {"source": "device-plugin", "namespace": "ml", "pod": "p", "container": "train"}
    capped = create_container_dir(
        state, "capped", {UUID: 1 << 30, OTHER: 1 << 30}, meta, {UUID: 30}
    )
    plain = create_container_dir(state, "plain", {UUID: 1 << 30}, {"source": "device-plugin"})
    return capped, plain


def _status(state: Path, entries: dict, age: float = 0.0) -> None:
    doc = {"time": time.time() - age, "gpus": {UUID: {"host_view": True, "containers": entries}}}
    status_path(state).write_text(json.dumps(doc))


def test_ledger_shows_the_host_figures(tmp_path: Path) -> None:
    capped, _ = _containers(tmp_path)
    _status(tmp_path, {str(capped): FIGURES})
    out = _ledger("--state-dir", tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = lines.index("capped  (ml/p/train)")
    assert lines[at + 2] == (
        "    compute limit 30% fixed normal  ledger 0.0%  host: turns 29.5%  10 s 41.2%"
        "  out of turn 3.5 s  OVER COMPUTE"
    )
    # The other GPU, with no compute limit, and the container without one: no compute line.
    assert lines[at + 3].startswith(f"  {OTHER}  used")
    assert "compute" not in out.stdout.split("plain  (plain)")[1]

    shown = _ledger("--state-dir", tmp_path, "--json")
    records = {r["key"]: r for r in json.loads(shown.stdout)}
    assert records["capped"]["compute_status"] == "current"
    assert records["capped"]["host_compute"] == {
        UUID: {k: FIGURES[k] for k in FIGURES if k not in ("charged_ns", "forced_revokes")}
    }
    assert records["plain"]["host_compute"] == {}

    # A container directory named on the command line finds its state dir's status too.
    out = _ledger(capped)
    assert "host: turns 29.5%" in out.stdout


def test_ledger_says_when_the_host_view_is_missing_or_stale(tmp_path: Path) -> None:
    capped, _ = _containers(tmp_path)
    _status(tmp_path, {str(capped): FIGURES}, age=30)
    out = _ledger("--state-dir", tmp_path)
    assert out.returncode == 0, out.stderr
    assert "host: stale (written 30 s ago)" in out.stdout
    assert "41.2" not in out.stdout  # the old figures are not shown as current
    status_path(tmp_path).write_text("{garbage")
    assert "host: corrupt status file" in _ledger("--state-dir", tmp_path).stdout
    # --compute-status names another file.
    elsewhere = tmp_path / "other.json"
    doc = {"time": time.time(), "gpus": {UUID: {"containers": {str(capped): FIGURES}}}}
    elsewhere.write_text(json.dumps(doc))
    out = _ledger("--state-dir", tmp_path, "--compute-status", elsewhere)
    assert "out of turn 3.5 s" in out.stdout


def test_ledger_shows_the_compute_priority(tmp_path: Path) -> None:
    meta = {"source": "device-plugin", "namespace": "ml", "pod": "p", "container": "infer"}
    create_container_dir(tmp_path, "infer", {UUID: 1 << 30}, meta, {UUID: (20, "fixed", "high")})
    out = _ledger("--state-dir", tmp_path)  # no arbiter: the priority of the host's cgpu.conf
    assert out.returncode == 0, out.stderr
    assert "    compute limit 20% fixed high  ledger 0.0%  host: no arbiter status" in out.stdout
    (record,) = json.loads(_ledger("--state-dir", tmp_path, "--json").stdout)
    assert record["devices"][0]["compute_priority"] == "high"


def test_ledger_shows_a_best_effort_container(tmp_path: Path) -> None:
    """A container without a limit, on a GPU where another has one, takes turns as best effort:
    its line says so, without a limit it does not have, with the host's figures."""
    capped, plain = _containers(tmp_path)
    best = {**FIGURES, "limit": 0, "policy": "best-effort", "share_percent": 60.0}
    _status(tmp_path, {str(capped): FIGURES, str(plain): best})
    out = _ledger("--state-dir", tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = lines.index("plain  (plain)")
    line = "    compute best-effort normal  ledger 0.0%  host: turns 60.0%"
    assert lines[at + 2].startswith(line), lines[at + 2]
