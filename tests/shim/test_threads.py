"""Threads churning allocations leave exact accounting."""

from __future__ import annotations

from cgpu.core.ledger import read_ledger

GiB = 1 << 30
MiB = 1 << 20


def test_64_threads_churn_and_end_at_zero(shim_env, probe, ledger_dir):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    r = probe(env, "dlsym", "init", "threads", 64, 500, MiB, "info", timeout=120)
    assert r.one("threads") == ["0"]
    assert r.one("info") == ["0", str(GiB), str(GiB)]
    assert read_ledger(ledger_dir / "cgpu.ledger").devices[0].used == 0


def test_threads_racing_for_the_last_bytes_get_exactly_the_slice(shim_env, probe, ledger_dir):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    # 64 threads grab 2 MiB + 4 KiB (charged as 4 MiB) until refused: exactly 256 fit.
    r = probe(env, "gpa2", "init", "grab", 64, 2 * MiB + 4096, "info", timeout=120)
    assert r.one("grab") == ["256"]
    assert r.one("info") == ["0", str(GiB), str(GiB)]
    snap = read_ledger(ledger_dir / "cgpu.ledger")
    assert snap.devices[0].used == 0
    assert snap.devices[0].peak == GiB
