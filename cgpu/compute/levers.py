"""What the arbiter does to a container flagged for out-of-turn work (outofturn.py).

Without `--enforce`: its processes (those the host places in it, `attribution.py`, and its
connected peers) are stopped (SIGSTOP) whenever it holds none of its GPUs' tokens but in a
REVOKE's drain (the arbiter passes only holders not revoked), and continued (SIGCONT) as soon as
it is granted one: it launches in its turns and nowhere else, and what it queued runs in its
hold's tail (`GpuSchedule.set_tails`). A stopped process cannot say WANT nor DONE, so the arbiter
counts its connections as wanting, and as drained, when it stops them; a turn it then has no work
for ends as an idle one does. Without `--enforce` nothing is killed.

With `--enforce`: each of those processes is killed (SIGKILL), once.

Every signal goes through a pidfd opened before the process's start time is checked again
(`cgpu.core.procfs.signal_process`), so a recycled pid is never hit. Runs on the arbiter's thread:
a signal is a syscall or two, and nothing here waits.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Collection, Iterable, Mapping

from cgpu.core.procfs import signal_process

log = logging.getLogger(__name__)

Proc = tuple[int, int]  # (host pid, start time)
Signal = Callable[[int, int, int], bool]


class Levers:
    """Stops flagged containers outside their turns, or (enforce) kills their processes."""

    def __init__(self, enforce: bool = False, send: Signal = signal_process) -> None:
        self.enforce = enforce
        self._send = send
        self._targets: dict[str, set[Proc]] = {}  # flagged container -> its processes
        self._stopped: dict[str, set[Proc]] = {}  # container -> the processes it stopped
        self._killed: set[Proc] = set()
        self.kills = 0
        self.stops = 0

    @property
    def active(self) -> bool:
        """Whether some container is flagged (else `follow` has nothing to do)."""
        return bool(self._targets or self._stopped)

    def set_targets(self, targets: Mapping[str, Iterable[Proc]]) -> list[int]:
        """The flagged containers and their processes now; containers no longer flagged are
        continued. With enforce, kills the processes not killed yet; returns the pids killed."""
        self._targets = {name: set(procs) for name, procs in targets.items()}
        for name in [n for n in self._stopped if n not in self._targets]:
            self._continue(name)
        if not self.enforce:
            return []
        killed = []
        for name, procs in self._targets.items():
            for proc in sorted(procs - self._killed):
                self._killed.add(proc)
                if self._send(proc[0], proc[1], signal.SIGKILL):
                    self.kills += 1
                    killed.append(proc[0])
                    log.warning("killed pid %d of %s: out-of-turn work on the GPU", proc[0], name)
        return killed

    def follow(self, holding: Collection[str]) -> list[str]:
        """Continue the flagged containers that hold a token, stop those that hold none;
        returns the containers stopped now (their connections are to be counted as wanting)."""
        if self.enforce:
            return []
        stopped_now = []
        for name, procs in self._targets.items():
            if name in holding:
                if name in self._stopped:
                    self._continue(name)
                continue
            done = self._stopped.get(name)
            fresh = procs - done if done is not None else procs
            if not fresh:
                continue
            for pid, started in sorted(fresh):
                self._send(pid, started, signal.SIGSTOP)
            self._stopped.setdefault(name, set()).update(fresh)
            if done is None:
                self.stops += 1
                stopped_now.append(name)
        return stopped_now

    def release(self) -> None:
        """Continue every process stopped (the arbiter is closing)."""
        for name in list(self._stopped):
            self._continue(name)
        self._targets = {}

    def _continue(self, name: str) -> None:
        for pid, started in sorted(self._stopped.pop(name, ())):
            self._send(pid, started, signal.SIGCONT)
