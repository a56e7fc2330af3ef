"""A context's cost from the host's `context` line in cgpu.conf: used as given, over
CGPU_CONTEXT_OVERHEAD and the shim's own measurement, and not disturbed by what other
processes of the container allocate meanwhile."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cgpu.core.ledger import read_ledger

GiB = 1 << 30
MiB = 1 << 20
UUID = "GPU-c0c0c0c0-0000-4000-8000-000000000000"


def _config(ledger_dir: Path, context: str | None) -> None:
    line = f"context {UUID} {context}\n" if context is not None else ""
    (ledger_dir / "cgpu.conf").write_text(f"version 1\ndevice {UUID} 1GiB\n{line}")


def test_the_hosts_context_cost_wins(shim_env, probe, ledger_dir):
    """The simulator's context takes 64 MiB and the environment says 128 MiB; the host's
    line (32 MiB) is what is charged."""
    _config(ledger_dir, "32MiB")
    env = shim_env({"CGPU_CONTEXT_OVERHEAD": "128MiB"}, uuids=UUID, ctx_overhead="64MiB")
    r = probe(env, "dlsym", "init", "info")
    assert r.one("info") == ["0", str(GiB - 32 * MiB), str(GiB)]
    _config(ledger_dir, "0")  # a host may say a context costs nothing
    r = probe(env, "dlsym", "init", "info")
    assert r.one("info") == ["0", str(GiB), str(GiB)]


def test_without_the_line_the_environment_then_the_measurement_decide(shim_env, probe, ledger_dir):
    _config(ledger_dir, None)
    env = shim_env({"CGPU_CONTEXT_OVERHEAD": "128MiB"}, uuids=UUID, ctx_overhead="64MiB")
    assert probe(env, "dlsym", "init", "info").one("info")[1] == str(GiB - 128 * MiB)
    env = shim_env(uuids=UUID, ctx_overhead="64MiB")
    assert probe(env, "dlsym", "init", "info").one("info")[1] == str(GiB - 64 * MiB)


def test_starts_beside_an_allocating_process_are_charged_the_context_alone(
    shim_env, native_build, ledger_dir
):
    """Measured around the context's creation, a start can be charged a neighbour's
    allocation too (an over-charge: 20 of 40 starts beside a 640 MiB loop). With the host's
    line every start is charged exactly the context."""
    _config(ledger_dir, "64MiB")
    env = shim_env(uuids=UUID, ctx_overhead="64MiB")
    probe_exe = str(native_build / "cuda_probe")
    loop = subprocess.Popen(
        [probe_exe, "dlsym", "init", "loop", "0", str(256 * MiB)],
        env=env,
        stdout=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    charged = []
    try:
        for _ in range(12):
            start = subprocess.Popen(
                [probe_exe, "dlsym", "init", "ready", "wait"],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert [start.stdout.readline().strip() for _ in range(2)] == ["init 0", "ready"]
            snapshot = read_ledger(ledger_dir / "cgpu.ledger")
            (mine,) = [p for p in snapshot.processes if p.pid == start.pid]
            charged.append(mine.used.get(UUID, 0))
            start.communicate("", timeout=30)
    finally:
        loop.kill()
        loop.wait(30)
    assert charged == [64 * MiB] * 12
