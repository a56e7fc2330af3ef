"""The arbiter's loop: one thread, one selector, every container socket and connection.

Each pass sleeps until the next event or deadline (a GPU schedule's `next_deadline`, a chore,
a paused socket's end; no fixed tick), reads the ready connections container by container, each
within its budget (guard.py), checks the processes that owe a DONE, and steps every GPU's
schedule, sending what it orders. Every 0.5 s it rescans the container directories, every
~100 ms it trades snapshots with the NVML thread (sampler.py), and every second it writes the
status file. A connection that misbehaves is closed and its container's socket paused; nothing
a container sends or writes stops the loop or costs another container its turns.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import resource
import selectors
import socket
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from cgpu.core.computestatus import BEST_EFFORT
from cgpu.core.containers import make_private_root

from . import protocol, status
from .clients import UNGATED_REASON, Client, handle
from .discovery import Discovery, Limits
from .exchange import best_effort_only, snapshot
from .guard import ACCEPTS_PER_PASS, PENALTY_NS, ContainerGuard, RateLimitedLog
from .levers import Levers
from .listener import Listener, intact, listen, unlisten
from .peer import halted, peer_of
from .sampler import HostFigures, Sampler
from .schedule import GpuSchedule
from .turnstate import Order, Phase
from .unhooked import Unhooked, UnhookedTurns
from .unmanaged import BusySource, NvmlSource

log = logging.getLogger(__name__)

MS = 1_000_000
SCAN_NS = 500 * MS
UNMANAGED_NS = 100 * MS
UNMANAGED_QUIET_NS = 500 * MS  # while no GPU has a holder or a waiter (idle containers)
STATUS_NS = 1000 * MS
DRAIN_CHECK_NS = 2 * MS  # how often a process that owes a DONE is checked for stopped or dead
MAX_SLEEP_NS = 1000 * MS  # the longest sleep, whatever is due
NOFILE_RESERVE = 64  # descriptors kept for listeners' peers, NVML, the status file
MAX_STEP_ROUNDS = 8
NEVER = 1 << 63  # no deadline
# A container flagged for out-of-turn work keeps the token this many quanta after its drain (its
# processes stopped): what it queued past its gate runs then, not in the next holder's turn
TAIL_QUANTA = 1.0
UNHOOKED_STATE_NAME = "compute-arbiter-stopped.json"  # beside the status file (unhooked.py)


@dataclass(frozen=True)
class ArbiterConfig:
    """The arbiter's options."""

    roots: tuple[Path, ...]
    quantum_ns: int = 20 * MS
    drain_cap_ns: int = 1000 * MS
    idle_release_ns: int = 2 * MS
    status: Path | None = None
    nvml: bool = True
    enforce: bool = False  # kill a container's processes flagged for out-of-turn work


@dataclass(eq=False)
class _Container:
    """A container directory with a compute limit and its listening socket."""

    name: str
    limits: Limits
    listener: Listener
    clients: set[Client] = field(default_factory=set)
    guard: ContainerGuard = field(default_factory=ContainerGuard)
    listening: bool = False  # its listener is in the selector (not paused)
    slowed_until: int = 0  # its connections are not read before this (its packets spent)


class Arbiter:
    """Serves every container under the roots until `stop()`.

    `busy_source` replaces NVML for the unmanaged-load estimator (tests, or another reader).
    """

    def __init__(self, settings: ArbiterConfig, busy_source: BusySource | None = None) -> None:
        self.settings = settings
        self.bad_messages = 0
        self._clock = time.monotonic_ns
        self._discovery = Discovery(settings.roots)
        self._containers: dict[str, _Container] = {}
        self._cannot_listen: set[str] = set()
        self._gpus: dict[str, GpuSchedule[Client]] = {}
        self._loads: dict[str, float] = {}
        if busy_source is None and settings.nvml:
            busy_source = NvmlSource.open()
        self._source = busy_source
        # Every NVML call is made on the sampler's thread (sampler.py), never on this one.
        self._sampler = Sampler(busy_source)
        self._sampler.start()
        self._levers = Levers(settings.enforce)
        stopped = settings.status.with_name(UNHOOKED_STATE_NAME) if settings.status else None
        self._unhooked = UnhookedTurns(stopped, drain_ns=settings.quantum_ns // 4)
        if self._unhooked.recover():
            log.warning("continued the processes a previous arbiter had stopped outside turns")
        self._host: dict[str, HostFigures] = {}
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        for end in (self._wake_r, self._wake_w):
            end.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, self._drain_wake)
        self._stopping = False
        self._closed = False
        self._next = {"scan": 0, "unmanaged": 0, "status": 0}
        self._polled = 0  # the last trade of snapshots with the NVML thread
        self._ready: dict[_Container, set[Client]] = {}  # connections with packets waiting
        self._rotation = 0  # which container is read first in a pass
        self._next_drain_check = 0
        # When a GPU's schedule next acts without an event (`next_deadline` after the last
        # step); None: its state changed since.
        self._gpu_due: int | None = None
        self._drain_due = NEVER  # when a process that owes a DONE is next looked at
        self._resume_due = 0  # when a paused socket or a slowed container is next due
        self._fds_paused_until = 0  # every socket's accepts wait after EMFILE
        self.refused_connections = 0
        self.closed_clients = 0  # closed for misbehaving (malformed, flooding, unreadable)
        self.closes = 0  # connections closed, for any reason
        self._say = RateLimitedLog(log)
        self._nofile = _raise_nofile()

    @property
    def bad_configs(self) -> int:
        """Malformed config files seen (each version of a file counts once)."""
        return self._discovery.bad_configs

    # --- life ------------------------------------------------------------------------------

    def run(self) -> None:
        """Serve until `stop()`, then close everything."""
        try:
            while not self._stopping:
                self._pass()
        finally:
            self.close()

    def stop(self) -> None:
        """Make `run()` return soon; safe from a signal handler or another thread."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def close(self) -> None:
        """Close every connection and listener, and unlink the sockets."""
        if self._closed:
            return
        self._closed = True
        now = self._clock()
        for name in list(self._containers):
            self._drop(name, now)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
        self._levers.release()
        self._unhooked.release()
        ended = self._sampler.stop()  # a thread stuck in NVML is left behind
        if ended and isinstance(self._source, NvmlSource):
            self._source.close()

    def _pass(self) -> None:
        """One turn of the loop. The GPUs are stepped when something reached their schedules
        (a packet that changed one, a closed connection, a stopped process, a new limit, the
        NVML thread's report: each sets `_gpu_due` to None) or a deadline of theirs is due: in
        between a step does nothing (`GpuSchedule.next_deadline`)."""
        self._periodic(self._clock())
        timeout = self._timeout(self._clock())
        events = self._selector.select(timeout)
        now = self._clock()
        for key, _ in events:
            key.data(now)
        self._serve(now)
        self._check_drains(now)
        if self._unhooked.tick(self._gpus, now):  # an unhooked holder's drain allowance ended
            self._gpu_due = None
        if self._gpu_due is None or now >= self._gpu_due:
            self._step(now)
        if self._levers.active:
            self._follow(now)

    def _timeout(self, now: int) -> float:
        """Seconds to wait: until the earliest of the GPUs' deadlines, the chores, the end of
        a pause, and (while a process owes a DONE) its next check."""
        due = min(self._next["scan"], now + MAX_SLEEP_NS, self._resume_due)
        if self._source is not None and self._gpus:
            due = min(due, self._next["unmanaged"])
        if self.settings.status is not None:
            due = min(due, self._next["status"])
        # Changed since the last step (a chore): the deadlines as the GPUs stand now.
        gpu_due = self._deadline(now) if self._gpu_due is None else self._gpu_due
        self._drain_due = self._drain_check_due()
        due = min(due, gpu_due, self._drain_due, self._unhooked.next_due or NEVER)
        return max(0.0, (due - now) / 1e9)

    def _deadline(self, now: int) -> int:
        """The GPUs' earliest deadline (NEVER for none)."""
        due = NEVER
        for gpu in self._gpus.values():
            deadline = gpu.next_deadline(now)
            if deadline is not None:
                due = min(due, deadline)
        return due

    def _periodic(self, now: int) -> None:
        """The chores that are due: paused sockets, rescan, unmanaged load, status."""
        if now >= self._resume_due:
            self._resume(now)
        if now >= self._next["scan"]:
            self._next["scan"] = now + SCAN_NS
            self._scan(now)
        if now >= self._next["unmanaged"]:
            self._polled = now
            quiet = self._quiet()
            self._next["unmanaged"] = now + (UNMANAGED_QUIET_NS if quiet else UNMANAGED_NS)
            self._poll_unmanaged(now)
        if self.settings.status is not None and now >= self._next["status"]:
            self._next["status"] = now + STATUS_NS
            self._write_status(now)

    def _drain_wake(self, now: int) -> None:
        with contextlib.suppress(OSError):
            self._wake_r.recv(4096)

    # --- containers ------------------------------------------------------------------------

    def _scan(self, now: int) -> None:
        """Follow the container directories: new ones, gone ones, changed limits. A root that
        cannot be listed now (EMFILE, EIO) changes nothing."""
        self._guard_roots(now)
        try:
            scanned = self._discovery.scan()
        except OSError as err:
            self._say.say("scan", now, logging.WARNING, "cannot scan the containers: %s", err)
            return
        found = {str(path): limits for path, limits in scanned.items()}
        for name in [n for n in self._containers if n not in found]:
            self._drop(name, now)
        self._cannot_listen &= found.keys()
        for name, limits in found.items():
            container = self._containers.get(name)
            if container is None:
                self._add(name, limits, now)
                continue
            if not intact(container.listener):  # its socket file was removed or replaced
                self._relisten(container)
            if container.limits != limits:
                self._set_limits(container, limits, now)

    def _guard_roots(self, now: int) -> None:
        """Keep every existing containers root closed to other host users (its sockets are
        0666 so that any user inside a container may connect: the root's mode is the fence)."""
        for root in self.settings.roots:
            try:
                if os.stat(root, follow_symlinks=False).st_mode & 0o077:
                    make_private_root(root)
                    if os.stat(root, follow_symlinks=False).st_mode & 0o077:
                        what = "open to other users, and not the arbiter's to close"
                        self._say.say(f"root {root}", now, logging.WARNING, "%s: %s", root, what)
                    else:
                        log.warning("%s: group and other access taken away", root)
            except FileNotFoundError:
                continue
            except OSError as err:
                self._say.say(f"root {root}", now, logging.WARNING, "%s: %s", root, err)

    def _add(self, name: str, limits: Limits, now: int) -> None:
        """Listen in a new container's directory and give it its limits."""
        try:
            listener = listen(Path(name))
        except OSError as err:
            if name not in self._cannot_listen:  # logged once, tried at every scan
                self._cannot_listen.add(name)
                log.warning("%s: cannot listen, trying again at each scan: %s", name, err)
            return
        self._cannot_listen.discard(name)
        container = _Container(name, {}, listener)
        self._containers[name] = container
        self._listen(container, now)
        self._set_limits(container, limits, now)
        log.info("%s: listening, limits %s", name, limits)

    def _relisten(self, container: _Container) -> None:
        """A new listening socket in place of one whose file has gone; connections stay."""
        try:
            listener = listen(Path(container.name))
        except OSError as err:
            log.warning("%s: socket file gone, cannot listen afresh: %s", container.name, err)
            return
        log.warning("%s: socket file gone, listening afresh", container.name)
        self._mute(container)
        container.listener.sock.close()
        container.listener = listener
        self._listen(container, self._clock())

    def _listen(self, container: _Container, now: int) -> None:
        """Put the container's listener in the selector, unless its accepts are paused."""
        paused = max(container.guard.paused_until, self._fds_paused_until)
        if container.listening:
            return
        if now < paused:
            self._resume_due = min(self._resume_due, paused)
            return
        self._selector.register(
            container.listener.sock, selectors.EVENT_READ, partial(self._accept, container)
        )
        container.listening = True

    def _mute(self, container: _Container) -> None:
        """Take the container's listener out of the selector (its clients wait in the backlog)."""
        if container.listening:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(container.listener.sock)
            container.listening = False
            paused = max(container.guard.paused_until, self._fds_paused_until)
            self._resume_due = min(self._resume_due, paused)

    def _resume(self, now: int) -> None:
        """Listeners whose pause has ended listen again; slowed containers are read again.
        When the next of those is due is kept (`_mute` and `_slow` bring it forward)."""
        self._resume_due = NEVER
        for container in self._containers.values():
            if not container.listening:
                self._listen(container, now)
            if container.slowed_until and now >= container.slowed_until:
                container.slowed_until = 0
                for client in container.clients:
                    self._watch(client)
            if container.slowed_until:
                self._resume_due = min(self._resume_due, container.slowed_until)
            if not container.listening:
                paused = max(container.guard.paused_until, self._fds_paused_until)
                self._resume_due = min(self._resume_due, paused)

    def _drop(self, name: str, now: int) -> None:
        """Close a container's connections and listener, unlink its socket, forget it."""
        container = self._containers.pop(name)
        self._set_limits(container, {}, now)  # best-effort GPUs are REFUSEd before the close
        for client in list(container.clients):
            self._close(client, now)
        self._mute(container)
        unlisten(container.listener)
        self._ready.pop(container, None)
        self._say.forget(name)
        log.info("%s: no longer served", name)

    def _set_limits(self, container: _Container, limits: Limits, now: int) -> None:
        """Apply new limits: a GPU that lost its line closes the connections that use it; one
        where the container was best effort and nobody has a limit any more is REFUSEd to
        them (their gates open at once, with no wait for a reconnection)."""
        self._gpu_due = None
        for uuid in container.limits.keys() - limits.keys():
            best_effort = container.limits[uuid][1] == BEST_EFFORT
            for client in [c for c in container.clients if uuid in c.devs.values()]:
                if best_effort:
                    self._release(client, uuid, now)
                else:
                    self._close(client, now)
            gpu = self._gpus[uuid]
            gpu.remove(container.name, now)
            if not gpu.containers:
                del self._gpus[uuid]
                self._loads.pop(uuid, None)
                self._host.pop(uuid, None)
        for uuid, (percent, policy, priority) in limits.items():
            gpu = self._gpus.get(uuid)
            if gpu is None:
                gpu = self._gpus[uuid] = self._new_gpu(now)
            gpu.set_limit(container.name, percent, policy, priority)
        container.limits = dict(limits)

    def _release(self, client: Client, uuid: str, now: int) -> None:
        """REFUSE a GPU the client was best effort on; it no longer takes turns there."""
        for dev in [d for d, u in client.devs.items() if u == uuid]:
            del client.devs[dev]
            client.released.add(dev)
            self._gpus[uuid].gone(client, now)
            self._send(client, protocol.refuse(dev, UNGATED_REASON), now)

    def _new_gpu(self, now: int) -> GpuSchedule[Client]:
        s = self.settings
        return GpuSchedule(s.quantum_ns, s.drain_cap_ns, s.idle_release_ns, now)

    # --- connections -----------------------------------------------------------------------

    def _accept(self, container: _Container, now: int) -> None:
        """Take a few of a container's pending connections (ACCEPTS_PER_PASS a pass). Over its
        cap, or the node's, a connection is closed at once and the socket paused; out of
        descriptors, every socket is paused (never a spin on EMFILE)."""
        for _ in range(ACCEPTS_PER_PASS):
            try:
                sock, _ = container.listener.sock.accept()
            except BlockingIOError:
                return
            except OSError as err:
                if err.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._out_of_descriptors(err, now)
                    return
                continue  # ECONNABORTED and the like: that one is gone, take the next
            over = len(container.clients) >= container.guard.max_connections
            if not over and self._connections() >= self._node_cap():
                over = not self._evict_for(container, now)
            if over:
                sock.close()
                self.refused_connections += 1
                full = len(container.clients) >= container.guard.max_connections
                what = f"its {container.guard.max_connections}" if full else "the node's"
                self._say.say(
                    f"{container.name} cap",
                    now,
                    logging.WARNING,
                    "%s: over %s connections; one closed, the socket paused",
                    container.name,
                    what,
                )
                container.guard.paused_until = max(container.guard.paused_until, now + PENALTY_NS)
                self._mute(container)
                return
            sock.setblocking(False)
            client = Client(sock, container.name, peer_of(sock))
            container.clients.add(client)
            if not container.slowed_until:
                self._watch(client)

    def _connections(self) -> int:
        """The connections open now, over every container."""
        return sum(len(container.clients) for container in self._containers.values())

    def _node_cap(self) -> int:
        """The most connections the node takes: what the descriptor limit leaves beside the
        listeners and a reserve (a quarter of a small limit)."""
        reserve = min(NOFILE_RESERVE, self._nofile // 4)
        return max(0, self._nofile - reserve - len(self._containers))

    def _evict_for(self, container: _Container, now: int) -> bool:
        """The node is full: make room for `container` by closing a connection of the
        container with the most, if that one has at least two more; False when none does."""
        largest = max(self._containers.values(), key=lambda c: len(c.clients))
        if len(largest.clients) < len(container.clients) + 2:
            return False
        victim = next(iter(largest.clients))
        self._say.say(
            "evict",
            now,
            logging.WARNING,
            "the node's connections are full: one of %s's %d closed for %s",
            largest.name,
            len(largest.clients),
            container.name,
        )
        self._close(victim, now)
        return True

    def _out_of_descriptors(self, err: OSError, now: int) -> None:
        """EMFILE and its kin: pause every socket's accepts a while."""
        self._fds_paused_until = now + PENALTY_NS
        for container in self._containers.values():
            self._mute(container)
        self._say.say("fds", now, logging.WARNING, "cannot accept (%s): sockets paused", err)

    def _watch(self, client: Client) -> None:
        """Put a connection in the selector."""
        if not client.closed:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.register(
                    client.sock, selectors.EVENT_READ, partial(self._mark_ready, client)
                )

    def _mark_ready(self, client: Client, now: int) -> None:
        """A connection has packets: read in this pass's `_serve`, within its container's
        budget."""
        container = self._containers.get(client.container)
        if container is not None:
            self._ready.setdefault(container, set()).add(client)

    def _serve(self, now: int) -> None:
        """Read the ready connections container by container, starting with a different one
        each pass, one packet a connection in turn, up to each container's budget. What is
        left waits for the next pass; a container whose packets are spent is not read until
        its bucket refills."""
        ready, self._ready = list(self._ready.items()), {}
        if not ready:
            return
        start = self._rotation % len(ready)
        self._rotation += 1
        for container, clients in ready[start:] + ready[:start]:
            if self._containers.get(container.name) is not container:
                continue  # dropped in this pass
            budget = container.guard.budget(now)
            queue = [client for client in clients if not client.closed]
            used = 0
            while queue and used < budget:
                client = queue.pop(0)
                if self._read_one(client, now):
                    used += 1
                    if not client.closed:
                        queue.append(client)
            container.guard.packets.take(used, now)
            if queue and container.guard.packets.level(now) < 1:
                self._slow(container, now)

    def _slow(self, container: _Container, now: int) -> None:
        """Stop reading a container whose packets are spent until its bucket refills."""
        container.slowed_until = container.guard.packets.ready_at(now)
        self._resume_due = min(self._resume_due, container.slowed_until)
        for client in container.clients:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(client.sock)
        self._say.say(
            f"{container.name} slow",
            now,
            logging.INFO,
            "%s: over its packets a second, its connections are read more slowly",
            container.name,
        )

    def _read_one(self, client: Client, now: int) -> bool:
        """Read and handle one packet; False when there was none. EOF closes the connection; a
        malformed packet, or one past the connection's rate, closes it and pauses its
        container's socket."""
        try:
            packet = client.sock.recv(protocol.SIZE + 1)
        except BlockingIOError:
            return False
        except OSError:
            packet = b""
        if not packet:
            self._close(client, now)
            return False
        if not client.meter.count_one(now):
            self._misbehaved(client, now, "more packets in a second than a shim sends")
            return True
        try:
            message = protocol.unpack_client(packet)
            limits = self._containers[client.container].limits
            handled = handle(client, message, limits, self._gpus, now)
        except protocol.ProtocolError as err:  # raised before any change
            self.bad_messages += 1
            self._misbehaved(client, now, str(err))
            return True
        except Exception:  # a bug here must not take the other containers down
            log.exception("%s: closing a connection after an error", client.container)
            self._gpu_due = None
            self._close(client, now)
            return True
        if handled.changed:
            self._gpu_due = None  # step the GPUs in this pass
        for reply in handled.replies:
            self._send(client, reply, now)
        return True

    def _misbehaved(self, client: Client, now: int, why: str) -> None:
        """Close a connection that broke the protocol; its container's socket is paused."""
        self.closed_clients += 1
        self._say.say(
            f"{client.container} bad",
            now,
            logging.INFO,
            "%s: closing a connection: %s",
            client.container,
            why,
        )
        self._close(client, now)
        container = self._containers.get(client.container)
        if container is not None and container.guard.offend(now) > now:
            self._mute(container)

    def _send(self, client: Client, data: bytes, now: int) -> None:
        """Send one packet without blocking; a connection that cannot take it is closed."""
        if client.closed:
            return
        try:
            client.sock.send(data)
        except OSError as err:  # BlockingIOError: it does not read its messages
            self._say.say(
                f"{client.container} send",
                now,
                logging.INFO,
                "%s: closing a connection that cannot be sent to: %s",
                client.container,
                err,
            )
            self._close(client, now)

    def _close(self, client: Client, now: int) -> None:
        """Close a connection; its GPUs see it gone."""
        if client.closed:
            return
        client.closed = True
        self.closes += 1
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(client.sock)
        client.sock.close()
        for uuid in client.devs.values():
            gpu = self._gpus.get(uuid)
            if gpu is not None:
                gpu.gone(client, now)
                self._gpu_due = None
        container = self._containers.get(client.container)
        if container is not None:
            container.clients.discard(client)
            self._ready.get(container, set()).discard(client)

    # --- scheduling ------------------------------------------------------------------------

    def _check_drains(self, now: int) -> None:
        """A process that owes a DONE but is stopped or dead is drained as far as it can be.
        /proc is read once the work its container said it queued (SPENT) should have run, and
        no sooner than DRAIN_CHECK_NS after the REVOKE, then every DRAIN_CHECK_NS until it
        answers. Before that no DONE is what a running process does too, and what a stopped one
        queued still runs: looking at every REVOKE (most DONEs come within DRAIN_CHECK_NS) was a
        tenth of the arbiter's busy time, looking every DRAIN_CHECK_NS through every drain half
        its wakeups."""
        if now < self._drain_due:  # as `_timeout` found it this pass
            return
        looked = False
        for gpu in self._gpus.values():
            if gpu.phase is not Phase.REVOKING or now < self._first_look(gpu):
                continue
            owing = gpu.draining()
            if not owing:
                continue
            looked = True
            for client in owing:
                if client.peer is not None and halted(client.peer):
                    gpu.stopped(client, now)
                    self._gpu_due = None
        if looked:
            self._next_drain_check = now + DRAIN_CHECK_NS

    @staticmethod
    def _first_look(gpu: GpuSchedule[Client]) -> int:
        """When the processes that owe a DONE on a revoking GPU are first looked at."""
        return max(gpu.revoked_at() + DRAIN_CHECK_NS, gpu.queued_until())

    def _drain_check_due(self) -> int:
        """When `_check_drains` next has a process to look at (NEVER while none owes a DONE;
        a GPU whose holder is revoked has one that does, or its step would have ended the
        hold)."""
        due = NEVER
        for gpu in self._gpus.values():
            if gpu.phase is Phase.REVOKING:
                due = min(due, self._first_look(gpu))
        return due if due == NEVER else max(due, self._next_drain_check)

    def _step(self, now: int) -> None:
        """Step every GPU and send its orders, again while carrying them out changed a schedule
        (a connection that could not be sent to was closed; an unhooked process was stopped and
        counted drained); then note the GPUs' next deadline (none known while they still had
        orders to send). A step at the same instant after orders that changed nothing would
        find nothing to do: skipping it was a sixth of the loop's busy time."""
        self._gpu_due = None
        for _ in range(MAX_STEP_ROUNDS):
            closes, changed = self.closes, False
            for uuid, gpu in list(self._gpus.items()):
                for client, order in gpu.step(now):
                    if isinstance(client, Unhooked):
                        self._unhooked.order(client, order, gpu, now)
                        changed = True
                    elif not client.closed:
                        packet = _packet(client, uuid, order, gpu)
                        self._send(client, packet, now)
            if not changed and self.closes == closes:
                self._gpu_due = self._deadline(now)
                self._unquiet()
                return

    def _quiet(self) -> bool:
        """No GPU has a holder or a waiter, and no process is stopped or held outside turns: the
        NVML thread's reports can wait UNMANAGED_QUIET_NS (16 idle containers woke the arbiter
        ten times a second for them: 0.6% of a core)."""
        if self._levers.active or self._unhooked.pids:
            return False
        return all(gpu.quiet() for gpu in self._gpus.values())

    def _unquiet(self) -> None:
        """After a step: a GPU that is no longer quiet has the reports every UNMANAGED_NS again."""
        due = self._polled + UNMANAGED_NS
        if self._next["unmanaged"] > due and not self._quiet():
            self._next["unmanaged"] = due

    def _poll_unmanaged(self, now: int) -> None:
        """Publish the hold logs and connections to the NVML thread, and apply its latest
        report: each GPU's unmanaged load and probe, out-of-turn charges, the host view and
        the levers on flagged containers. Nothing here waits for NVML."""
        if self._source is None:
            return
        clients = {name: container.clients for name, container in self._containers.items()}
        self._sampler.publish(snapshot(clients, self._gpus, self._unhooked.pids, now))
        report = self._sampler.take()
        if report is None:
            return
        self._gpu_due = None  # what follows may change the GPUs' schedules
        for uuid, load in report.loads.items():
            gpu = self._gpus.get(uuid)
            if gpu is not None:
                gpu.set_unmanaged(load)
                self._loads[uuid] = load
        for uuid, gap in report.probes.items():
            if uuid in self._gpus:
                log.debug("%s: probe, the token free for %.1f ms", uuid, gap / MS)
                self._gpus[uuid].probe(gap)
        for uuid, name, ns in report.charges:
            if uuid in self._gpus:
                log.info("%s: %.1f ms of out-of-turn work on %s charged", name, ns / MS, uuid)
                self._gpus[uuid].charge_outside(name, ns, now)
        self._host = {uuid: host for uuid, host in report.host.items() if uuid in self._gpus}
        limits = {name: container.limits for name, container in self._containers.items()}
        self._unhooked.update(best_effort_only(report.unhooked, limits), self._gpus, now)
        targets = {  # processes in turns through their own lever are not stopped or killed
            name: set(procs) - self._unhooked.managed(name)
            for name, procs in report.targets.items()
        }
        for pid in self._levers.set_targets(targets):
            log.warning("pid %d killed (--enforce): out-of-turn work", pid)
        tail = round(self.settings.quantum_ns * TAIL_QUANTA)
        for gpu in self._gpus.values():
            gpu.set_tails({name: tail for name in targets})

    def _follow(self, now: int) -> None:
        """Stop flagged containers outside their turns, continue them in their turns; the
        connections of those stopped now count as wanting (a stopped process cannot say so)."""
        # Stopped from its REVOKE on: what it queued since drains in its hold's tail (set_tails)
        holding = {
            gpu.holder
            for gpu in self._gpus.values()
            if gpu.holder is not None and gpu.phase is Phase.GRANTED
        }
        for name in self._levers.follow(holding):
            container = self._containers.get(name)
            for client in container.clients if container else ():
                for uuid in client.devs.values():
                    gpu = self._gpus.get(uuid)
                    if gpu is None:
                        continue
                    if gpu.holder == name:  # revoked: it cannot DONE, its drain ends here
                        gpu.stopped(client, now)
                    gpu.want(client, now)
                    self._gpu_due = None

    def _write_status(self, now: int) -> None:
        path = self.settings.status
        assert path is not None
        doc = status.render(
            self._gpus, self._loads, now, self.bad_messages, self.bad_configs, host=self._host
        )
        try:
            status.write(path, doc)
        except OSError as err:
            log.warning("cannot write %s: %s", path, err)


def _packet(client: Client, uuid: str, order: Order, gpu: GpuSchedule[Client]) -> bytes:
    """The GRANT (with the work budget of a grant, how many processes split it and whether it
    must be counted) or REVOKE packet of `order`, for the client's index of the GPU."""
    dev = next(index for index, known in client.devs.items() if known == uuid)
    if order.kind == "grant":
        budget, sharers, counted = gpu.grant_work_ns(), gpu.sharers(), gpu.counted_grants()
        return protocol.grant(dev, order.epoch, order.share, budget, sharers, counted)
    return protocol.revoke(dev, order.epoch)


def _raise_nofile() -> int:
    """Raise the soft descriptor limit to the hard one; the limit that holds."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft == resource.RLIM_INFINITY:
        return hard
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError) as err:
            log.warning("cannot raise the descriptor limit from %d to %d: %s", soft, hard, err)
    return soft
