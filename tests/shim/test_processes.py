"""All processes of a container share one slice; a killed process loses nothing."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

from cgpu.core.ledger import read_ledger

GiB = 1 << 30
MiB = 1 << 20


def start(native_build, env, *commands):
    return subprocess.Popen(
        [str(native_build / "cuda_probe"), "dlsym", *map(str, commands)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_processes_share_one_slice(shim_env, probe, native_build, ledger_dir):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    holder = start(native_build, env, "init", "alloc", 600 * MiB, "ready", "wait")
    assert holder.stdout.readline().split() == ["init", "0"]
    assert holder.stdout.readline().split() == ["alloc", "0"]
    assert holder.stdout.readline().strip() == "ready"
    second = probe(env, "dlsym", "init", "info", "alloc", 600 * MiB, "alloc", 300 * MiB)
    assert second.one("info") == ["0", str(GiB - 600 * MiB), str(GiB)]
    assert [line[0] for line in second.lines("alloc")] == ["2", "0"]
    snap = read_ledger(ledger_dir / "cgpu.ledger")
    assert snap.devices[0].used == 600 * MiB and len(snap.processes) == 1
    holder.communicate("", timeout=30)
    assert probe(env, "dlsym", "init", "alloc", 900 * MiB).one("alloc") == ["0"]


def test_sigkill_returns_memory_at_once(shim_env, probe, native_build, ledger_dir):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    victim = start(native_build, env, "init", "alloc", 900 * MiB, "ready", "wait")
    assert victim.stdout.readline().split() == ["init", "0"]
    victim.stdout.readline()
    assert victim.stdout.readline().strip() == "ready"
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    # The next allocation that needs the memory gets it, with no waiting.
    assert probe(env, "dlsym", "init", "alloc", 900 * MiB).one("alloc") == ["0"]
    assert read_ledger(ledger_dir / "cgpu.ledger").devices[0].used == 0


def test_random_sigkill_during_alloc_free_loops_leaks_nothing(shim_env, native_build, ledger_dir):
    """Kill processes at random instants of a tight alloc/free loop; the total stays exact."""
    env = shim_env({"CGPU_MEM_LIMIT": "4GiB"})
    rng = random.Random(1234)
    kills = 0
    deadline = time.monotonic() + 20
    while kills < 150 and time.monotonic() < deadline:
        procs = [
            start(native_build, env, "init", "loop", 0, rng.choice([4096, MiB, 3 * MiB]))
            for _ in range(4)
        ]
        time.sleep(rng.uniform(0.02, 0.08))
        for p in procs:
            time.sleep(rng.uniform(0, 0.005))
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.communicate()
            kills += 1
    survivor = start(native_build, env, "init", "alloc", 256 * MiB, "ready", "wait")
    assert survivor.stdout.readline().split() == ["init", "0"]
    survivor.stdout.readline()
    assert survivor.stdout.readline().strip() == "ready"
    snap = read_ledger(ledger_dir / "cgpu.ledger")
    assert snap.devices[0].used == 256 * MiB, snap
    assert len(snap.processes) == 1
    survivor.communicate("", timeout=30)
    assert read_ledger(ledger_dir / "cgpu.ledger").devices[0].used == 0
    assert kills >= 40


def test_dead_process_slot_is_swept_by_readers(shim_env, native_build, ledger_dir):
    """A slot belongs to the holder of its lock, not to a pid number: a reader frees it."""
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    first = start(native_build, env, "init", "alloc", 100 * MiB, "ready", "wait")
    for _ in range(3):
        first.stdout.readline()
    first.send_signal(signal.SIGKILL)
    first.wait()
    snap = read_ledger(ledger_dir / "cgpu.ledger")
    assert snap.devices[0].used == 0 and snap.processes == []


def test_forked_child_shares_the_slice_but_not_the_parents_memory(shim_env, probe, ledger_dir):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    r = probe(env, "direct", "init", "alloc", 800 * MiB, "fork-alloc", 300 * MiB,
              "fork-alloc", 100 * MiB, "info")
    assert r.returncode == 0, r.stderr
    assert [line[0] for line in r.lines("child-alloc")] == ["2", "0"]
    # The child exited: only the parent's 800 MiB remain charged.
    assert r.one("info") == ["0", str(GiB - 800 * MiB), str(GiB)]


def storm(native_build, env, count: int) -> list[tuple[str, str]]:
    """`count` processes started at once, each allocating 1 MiB and exiting while holding it
    (its slot is left to die with it, as a killed process's is); their (stdout, stderr)."""
    procs = [start(native_build, env, "init", "alloc", MiB) for _ in range(count)]
    return [p.communicate(timeout=60) for p in procs]


def claimed_slots(ledger: Path) -> int:
    snap = read_ledger(ledger)
    return len(snap.processes) + snap.dead


def test_a_ledger_full_of_dead_slots_turns_nobody_away(shim_env, native_build, ledger_dir):
    """Every slot held by a process that is gone: processes starting together reclaim them,
    and none is refused because another claimer's sweep freed the slots first."""
    env = shim_env({"CGPU_MEM_LIMIT": "4GiB"})
    ledger = ledger_dir / "cgpu.ledger"
    for _ in range(16):
        while (free := 256 - (claimed_slots(ledger) if ledger.exists() else 0)) > 0:
            for out, err in storm(native_build, env, min(free, 64)):
                assert out.split() == ["init", "0", "alloc", "0"], err
        outcomes = storm(native_build, env, 64)
        refused = [err for out, err in outcomes if out.split() != ["init", "0", "alloc", "0"]]
        assert not refused, f"{len(refused)} of 64 refused: {refused[0]}"
