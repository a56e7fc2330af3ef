"""Turns for the processes of a best-effort container that were not hooked on launch.

A process decides at its first launch lookup whether its launches are gated: a container without
a compute limit is gated only where the arbiter has made it a socket (a neighbour on one of its
GPUs has a limit). A process that started before that, on a GPU that then gets a limited
neighbour, launches straight to the driver. The shim cannot gate it any more (the driver's own
functions are what it was handed), so the host gives it turns:

- it is one pseudo-connection (`Unhooked`) of its container on that GPU, always wanting while its
  processes are on the GPU (a best-effort container that idles takes turns it does not use only
  when nobody with work waits);
- a GRANT continues its processes (SIGCONT), a REVOKE stops them (SIGSTOP) and is answered
  `drain_ns` later (a quarter of a quantum by default): what the processes had queued on the GPU
  still runs after the stop, and the host cannot see how much; that allowance lets a queue of a
  few milliseconds drain in their own turn (with none, `fixed` 60 beside a process that syncs
  every 5 ms got 53.9-60.7), and a longer queue runs on, time-sliced against the next holder
  (its out-of-turn work, charged to it by the host view);
- processes are found by the NVML thread (the container's processes on the GPU that are no
  connection's peer) and signalled through a pidfd checked against their start time
  (`cgpu.core.procfs.signal_process`), so a recycled pid is never hit.

Cost: two signals per process per turn, and the CPU side of those processes stops outside their
turns as well. A process restarted after the GPU was gated is hooked as usual, and leaves this.

An arbiter that dies leaves them as they were, possibly stopped: the processes in turns are kept
in a file of the host's state directory (`state`, written when they change, not at each turn),
and the next arbiter continues them at its start (`recover`).
"""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cgpu.core.files import atomic_write
from cgpu.core.procfs import signal_process

from .schedule import GpuSchedule
from .turnstate import Order

log = logging.getLogger(__name__)

Proc = tuple[int, int]  # (host pid, start time)
Signal = Callable[[int, int, int], bool]
MAX_STATE_BYTES = 1 << 20


@dataclass(frozen=True)
class Unhooked:
    """The pseudo-connection of a container's unhooked processes on one GPU."""

    container: str
    uuid: str
    closed: bool = False  # never: a connection's fields, for the arbiter's loops
    peer: None = None  # no process of its own to look at in /proc (its DONE is the allowance)


class UnhookedTurns:
    """Gives the unhooked processes of best-effort containers turns by stopping them outside."""

    def __init__(
        self, state: Path | None = None, send: Signal = signal_process, drain_ns: int = 0
    ) -> None:
        self._send = send
        self._drain_ns = drain_ns
        self._draining: dict[Unhooked, tuple[int, int]] = {}  # conn -> (DONE due, epoch)
        self._state = state
        self._procs: dict[Unhooked, set[Proc]] = {}
        self._granted: set[Unhooked] = set()
        self._saved: set[Proc] = set()
        self.stops = 0  # SIGSTOPs sent

    def recover(self) -> int:
        """Continue the processes a previous arbiter had in turns (it may have died with them
        stopped); how many were continued. A missing or unreadable file: none."""
        if self._state is None:
            return 0
        try:
            with self._state.open("rb") as f:
                entries = json.loads(f.read(MAX_STATE_BYTES))
            procs = {(int(pid), int(started)) for pid, started in entries}
        except FileNotFoundError:
            return 0
        except (OSError, ValueError, TypeError) as err:
            log.warning("%s unreadable, nothing continued: %s", self._state, err)
            return 0
        continued = sum(self._send(pid, started, signal.SIGCONT) for pid, started in sorted(procs))
        self._saved = procs  # what the file says: emptied now
        self._save(set())
        return continued

    @property
    def pids(self) -> dict[str, set[int]]:
        """{GPU uuid: the host pids in turns here} (managed: not an unmanaged load)."""
        out: dict[str, set[int]] = {}
        for conn, procs in self._procs.items():
            out.setdefault(conn.uuid, set()).update(pid for pid, _ in procs)
        return out

    def managed(self, container: str) -> set[Proc]:
        """The processes of `container` in turns here, on any GPU."""
        return {p for c, procs in self._procs.items() if c.container == container for p in procs}

    def update(
        self,
        found: Mapping[tuple[str, str], Iterable[Proc]],
        gpus: Mapping[str, GpuSchedule[object]],
        now: int,
    ) -> None:
        """`found`: {(GPU uuid, container): its unhooked processes there}, best-effort ones
        only. New ones join their GPU's turns (stopped until granted), gone ones leave it."""
        current = {Unhooked(name, uuid): set(procs) for (uuid, name), procs in found.items()}
        for conn in [c for c in self._procs if c not in current or c.uuid not in gpus]:
            self._leave(conn, gpus, now)
        for conn, procs in current.items():
            gpu = gpus.get(conn.uuid)
            if gpu is None or not procs:
                continue
            known = self._procs.get(conn)
            if known is None:
                gpu.connect(conn, conn.container, now)
                known = self._procs[conn] = set()
            fresh = procs - known
            known.intersection_update(procs)  # ended ones
            known.update(fresh)
            if conn not in self._granted:
                self._save(self._saved | fresh)  # before the stop: a crash then continues them
                self._signal(fresh, signal.SIGSTOP)
                gpu.want(conn, now)
        self._save({p for procs in self._procs.values() for p in procs})

    def order(self, conn: Unhooked, order: Order, gpu: GpuSchedule[object], now: int) -> None:
        """Carry out a GRANT (continue) or REVOKE (stop, and DONE at once)."""
        procs = self._procs.get(conn, set())
        if order.kind == "grant":
            self._granted.add(conn)
            self._signal(procs, signal.SIGCONT)
            return
        self._granted.discard(conn)
        self._signal(procs, signal.SIGSTOP)
        if self._drain_ns > 0:
            self._draining[conn] = (now + self._drain_ns, order.epoch)
            return
        gpu.done(conn, order.epoch, now)
        gpu.want(conn, now)  # still has work as far as anyone can tell

    @property
    def next_due(self) -> int | None:
        """When the next DONE is due (None: none pending)."""
        if not self._draining:  # asked at every pass of the loop
            return None
        return min(due for due, _ in self._draining.values())

    def tick(self, gpus: Mapping[str, GpuSchedule[object]], now: int) -> bool:
        """Answer the DONEs that are due; whether one was."""
        if not self._draining:  # called at every pass of the loop
            return False
        due = [c for c, (at, _) in self._draining.items() if at <= now]
        for conn in due:
            _, epoch = self._draining.pop(conn)
            gpu = gpus.get(conn.uuid)
            if gpu is not None:
                gpu.done(conn, epoch, now)
                gpu.want(conn, now)
        return bool(due)

    def release(self) -> None:
        """Continue every process (the arbiter is closing)."""
        for procs in self._procs.values():
            self._signal(procs, signal.SIGCONT)
        self._procs.clear()
        self._granted.clear()
        self._draining.clear()
        self._save(set())

    def _leave(self, conn: Unhooked, gpus: Mapping[str, GpuSchedule[object]], now: int) -> None:
        self._signal(self._procs.pop(conn, set()), signal.SIGCONT)
        self._granted.discard(conn)
        self._draining.pop(conn, None)
        gpu = gpus.get(conn.uuid)
        if gpu is not None:
            gpu.gone(conn, now)

    def _save(self, procs: set[Proc]) -> None:
        """Keep the processes in turns in the state file, when they changed."""
        if self._state is None or procs == self._saved:
            return
        try:
            atomic_write(self._state, json.dumps(sorted(procs)), mode=0o600)
            self._saved = set(procs)
        except OSError as err:
            log.warning("cannot write %s: %s", self._state, err)

    def _signal(self, procs: Iterable[Proc], sig: int) -> None:
        for pid, started in sorted(procs):
            if self._send(pid, started, sig) and sig == signal.SIGSTOP:
                self.stops += 1
