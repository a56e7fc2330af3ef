"""Threads churning allocations leave exact accounting."""

from __future__ import annotations

import subprocess
from pathlib import Path

from cgpu.core.ledger import read_ledger

HERE = Path(__file__).resolve().parent
SHIM_SRC = HERE.parents[1] / "native" / "shim"

GiB = 1 << 30
MiB = 1 << 20


def test_64_threads_churn_and_end_at_zero(shim_env, probe, ledger_dir):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    r = probe(env, "dlsym", "init", "threads", 64, 500, MiB, "info", timeout=120)
    assert r.one("threads") == ["0"]
    assert r.one("info") == ["0", str(GiB), str(GiB)]
    assert read_ledger(ledger_dir / "cgpu.ledger").devices[0].used == 0


def test_contexts_dying_beside_churning_threads_take_only_their_own_memory(
    shim_env, probe, ledger_dir
):
    """A context's memory is learned from the driver (not recorded at allocation) only before a
    context may die: 16 threads allocate and free in the primary while another thread makes
    contexts, allocates in each and destroys it with the memory in it, 50 times over. An address
    the dying context's memory had is handed to a churning thread as soon as the driver frees
    it: that thread's entry must be the only one of the address then (failed about half the
    runs while the dying context's entries stayed in the table through the driver's call)."""
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    r = probe(env, "dlsym", "init", "threads-ctx", 16, 300, MiB, 50, "info", timeout=120)
    assert r.one("threads-ctx") == ["0", "0"]
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


def test_the_pointer_table_gives_back_the_oldest_entry_of_a_key(cc, tmp_path):
    """A free is accounted after the driver's free: by then another thread may hold the same
    address, and its newer entry must not be the one credited."""
    exe = tmp_path / "ptrtable_order"
    subprocess.run(
        [cc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-I", str(SHIM_SRC),
         str(SHIM_SRC / "ptrtable.c"), str(HERE / "ptrtable_order.c"), "-o", str(exe)],
        check=True,
    )
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert (run.returncode, run.stdout.strip()) == (0, "ok"), run.stdout
