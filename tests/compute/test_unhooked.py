"""Turns from the host for a best-effort container's unhooked processes (cgpu/compute/unhooked.py):
stopped outside their turns, continued in them, a neighbour with a limit served first, and no
process left stopped by an arbiter that goes away or dies."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from cgpu.compute.schedule import GpuSchedule
from cgpu.compute.unhooked import Unhooked, UnhookedTurns
from cgpu.core.computestatus import BEST_EFFORT

MS = 1_000_000
GPU = "GPU-1"
EARLY, LIMITED = "/c/early", "/c/limited"


class Signals:
    """The signals sent, per process: the last one is its state."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int]] = []

    def __call__(self, pid: int, started: int, sig: int) -> bool:
        self.sent.append((pid, sig))
        return True

    def state(self, pid: int) -> int | None:
        last = [sig for p, sig in self.sent if p == pid]
        return last[-1] if last else None


def _gpu() -> GpuSchedule[object]:
    gpu: GpuSchedule[object] = GpuSchedule(20 * MS, 1000 * MS, 2 * MS, 0)
    gpu.set_limit(EARLY, 0, BEST_EFFORT)
    gpu.set_limit(LIMITED, 60, "fixed")
    return gpu


def _run(gpu: GpuSchedule[object], turns: UnhookedTurns, now: int) -> list:
    """Step the GPU as the arbiter does: the pseudo-connection's orders are carried out."""
    out = []
    for _ in range(8):
        orders = gpu.step(now)
        if not orders:
            return out
        for conn, order in orders:
            out.append((conn, order.kind))
            if isinstance(conn, Unhooked):
                turns.order(conn, order, gpu, now)
    return out


def test_unhooked_processes_run_in_their_turns_only(tmp_path: Path) -> None:
    signals = Signals()
    turns = UnhookedTurns(tmp_path / "stopped.json", send=signals)
    gpu = _gpu()
    limited = object()
    gpu.connect(limited, LIMITED, 0)
    gpu.want(limited, 0)
    gpus = {GPU: gpu}
    turns.update({(GPU, EARLY): [(101, 7), (102, 8)]}, gpus, 0)
    assert signals.state(101) == signals.state(102) == signal.SIGSTOP  # joined: stopped
    assert turns.pids == {GPU: {101, 102}}
    orders = _run(gpu, turns, 1 * MS)
    assert (limited, "grant") in orders  # the limited one, with credit, first
    assert signals.state(101) == signal.SIGSTOP
    gpu.idle(limited, 2 * MS)  # the limited one has nothing more: best effort's turn
    assert (limited, "revoke") in _run(gpu, turns, 4 * MS)
    gpu.done(limited, gpu.epoch, 5 * MS)
    orders = _run(gpu, turns, 5 * MS)
    assert (Unhooked(EARLY, GPU), "grant") in orders
    assert signals.state(101) == signals.state(102) == signal.SIGCONT
    gpu.want(limited, 30 * MS)  # work again: best effort is revoked at the quantum's end
    orders = _run(gpu, turns, 30 * MS)
    assert (Unhooked(EARLY, GPU), "revoke") in orders
    assert (limited, "grant") in orders  # answered at once: no wait for a DONE
    assert signals.state(101) == signals.state(102) == signal.SIGSTOP
    assert json.loads((tmp_path / "stopped.json").read_text()) == [[101, 7], [102, 8]]


def test_processes_that_leave_are_continued_and_forgotten(tmp_path: Path) -> None:
    signals = Signals()
    turns = UnhookedTurns(tmp_path / "stopped.json", send=signals)
    gpus = {GPU: _gpu()}
    turns.update({(GPU, EARLY): [(101, 7), (102, 8)]}, gpus, 0)
    turns.update({(GPU, EARLY): [(101, 7)]}, gpus, 1 * MS)  # 102 ended
    assert turns.pids == {GPU: {101}}
    turns.update({}, gpus, 2 * MS)  # the GPU is no longer gated, or the processes went
    assert signals.state(101) == signal.SIGCONT
    assert turns.pids == {}
    assert json.loads((tmp_path / "stopped.json").read_text()) == []


def test_a_new_arbiter_continues_what_a_dead_one_stopped(tmp_path: Path) -> None:
    state = tmp_path / "stopped.json"
    first = UnhookedTurns(state, send=Signals())
    first.update({(GPU, EARLY): [(101, 7)]}, {GPU: _gpu()}, 0)  # stopped; then SIGKILLed
    signals = Signals()
    assert UnhookedTurns(state, send=signals).recover() == 1
    assert signals.sent == [(101, signal.SIGCONT)]
    assert json.loads(state.read_text()) == []


def test_an_unreadable_state_file_continues_nothing(tmp_path: Path) -> None:
    state = tmp_path / "stopped.json"
    state.write_text("not json")
    signals = Signals()
    assert UnhookedTurns(state, send=signals).recover() == 0
    assert signals.sent == []
    state.write_text('[["1", 2], [3]]')
    assert UnhookedTurns(state, send=signals).recover() == 0
    assert signals.sent == []


def test_a_revoke_is_answered_after_the_drain_allowance(tmp_path: Path) -> None:
    """What the stopped processes had queued still runs: the token stays theirs for the
    allowance, and the next holder is granted when it ends."""
    signals = Signals()
    turns = UnhookedTurns(send=signals, drain_ns=5 * MS)
    gpu = _gpu()
    gpus = {GPU: gpu}
    turns.update({(GPU, EARLY): [(101, 7)]}, gpus, 0)
    assert (Unhooked(EARLY, GPU), "grant") in _run(gpu, turns, 1 * MS)
    limited = object()
    gpu.connect(limited, LIMITED, 2 * MS)
    gpu.want(limited, 2 * MS)
    orders = _run(gpu, turns, 25 * MS)  # the quantum is over: revoked for the limited one
    assert (Unhooked(EARLY, GPU), "revoke") in orders
    assert (limited, "grant") not in orders
    assert signals.state(101) == signal.SIGSTOP
    assert turns.next_due == 30 * MS
    assert not turns.tick(gpus, 29 * MS)
    assert turns.tick(gpus, 30 * MS)
    assert (limited, "grant") in _run(gpu, turns, 30 * MS)
    assert turns.next_due is None
