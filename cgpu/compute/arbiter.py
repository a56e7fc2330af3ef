"""The arbiter's loop: one thread, one selector, every container socket and connection.

Each pass waits for events (1 ms while some GPU's token is held or wanted, longer when all are
quiet), handles them, checks the processes that owe a DONE, and steps every GPU's schedule,
sending what it orders. Every 0.5 s it rescans the container directories, every ~100 ms it reads
the unmanaged load, and every second it writes the status file. A malformed message closes its
connection; nothing a container sends or writes stops the loop.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from . import protocol, status
from .clients import Client, handle
from .discovery import Discovery, Limits
from .levers import Levers
from .listener import Listener, intact, listen, unlisten
from .peer import halted, peer_of
from .sampler import HOLD_LOOKBACK_NS, GpuSnapshot, HostFigures, Sampler, Snapshot
from .schedule import GpuSchedule, Order
from .unmanaged import BusySource, NvmlSource

log = logging.getLogger(__name__)

MS = 1_000_000
TICK_NS = 1 * MS
SCAN_NS = 500 * MS
UNMANAGED_NS = 100 * MS
STATUS_NS = 1000 * MS
MAX_CLIENTS = 512  # connections per container; more are closed at once
READS_PER_EVENT = 64  # packets read from one connection before others get a turn
MAX_STEP_ROUNDS = 8


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
        self._host: dict[str, HostFigures] = {}
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        for end in (self._wake_r, self._wake_w):
            end.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, self._drain_wake)
        self._stopping = False
        self._closed = False
        self._next = {"scan": 0, "unmanaged": 0, "status": 0}

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
        ended = self._sampler.stop()  # a thread stuck in NVML is left behind
        if ended and isinstance(self._source, NvmlSource):
            self._source.close()

    def _pass(self) -> None:
        """One turn of the loop."""
        self._periodic(self._clock())
        timeout = self._timeout(self._clock())
        events = self._selector.select(timeout)
        now = self._clock()
        for key, _ in events:
            key.data(now)
        self._check_drains(now)
        self._step(now)
        if self._levers.active:
            self._follow(now)

    def _timeout(self, now: int) -> float:
        """Seconds to wait: a tick while any token is held or wanted, else the next chore."""
        if any(not gpu.quiet() for gpu in self._gpus.values()):
            return TICK_NS / 1e9
        due = [self._next["scan"]]
        if self._source is not None and self._gpus:
            due.append(self._next["unmanaged"])
        if self.settings.status is not None:
            due.append(self._next["status"])
        return max(0.0, (min(due) - now) / 1e9)

    def _periodic(self, now: int) -> None:
        """The chores that are due: rescan, unmanaged load, status."""
        if now >= self._next["scan"]:
            self._next["scan"] = now + SCAN_NS
            self._scan(now)
        if now >= self._next["unmanaged"]:
            self._next["unmanaged"] = now + UNMANAGED_NS
            self._poll_unmanaged(now)
        if self.settings.status is not None and now >= self._next["status"]:
            self._next["status"] = now + STATUS_NS
            self._write_status(now)

    def _drain_wake(self, now: int) -> None:
        with contextlib.suppress(OSError):
            self._wake_r.recv(4096)

    # --- containers ------------------------------------------------------------------------

    def _scan(self, now: int) -> None:
        """Follow the container directories: new ones, gone ones, changed limits."""
        found = {str(path): limits for path, limits in self._discovery.scan().items()}
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
        self._selector.register(
            listener.sock, selectors.EVENT_READ, partial(self._accept, container)
        )
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
        self._selector.unregister(container.listener.sock)
        container.listener.sock.close()
        container.listener = listener
        self._selector.register(
            listener.sock, selectors.EVENT_READ, partial(self._accept, container)
        )

    def _drop(self, name: str, now: int) -> None:
        """Close a container's connections and listener, unlink its socket, forget it."""
        container = self._containers.pop(name)
        for client in list(container.clients):
            self._close(client, now)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(container.listener.sock)
        unlisten(container.listener)
        self._set_limits(container, {}, now)
        log.info("%s: no longer served", name)

    def _set_limits(self, container: _Container, limits: Limits, now: int) -> None:
        """Apply new limits: a GPU that lost its line closes the connections that use it."""
        for uuid in container.limits.keys() - limits.keys():
            for client in [c for c in container.clients if uuid in c.devs.values()]:
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

    def _new_gpu(self, now: int) -> GpuSchedule[Client]:
        s = self.settings
        return GpuSchedule(s.quantum_ns, s.drain_cap_ns, s.idle_release_ns, now)

    # --- connections -----------------------------------------------------------------------

    def _accept(self, container: _Container, now: int) -> None:
        """Take the pending connections of a container."""
        for _ in range(protocol.MAX_DEVICES * 4):
            try:
                sock, _ = container.listener.sock.accept()
            except OSError:  # BlockingIOError: none left
                return
            if len(container.clients) >= MAX_CLIENTS:
                log.warning("%s: over %d connections, closing one", container.name, MAX_CLIENTS)
                sock.close()
                continue
            sock.setblocking(False)
            client = Client(sock, container.name, peer_of(sock))
            container.clients.add(client)
            self._selector.register(sock, selectors.EVENT_READ, partial(self._read, client))

    def _read(self, client: Client, now: int) -> None:
        """Handle the packets waiting on a connection; close it on EOF or a malformed one."""
        for _ in range(READS_PER_EVENT):
            if client.closed:
                return
            try:
                packet = client.sock.recv(protocol.SIZE + 1)
            except BlockingIOError:
                return
            except OSError:
                packet = b""
            if not packet:
                self._close(client, now)
                return
            try:
                message = protocol.unpack_client(packet)
                limits = self._containers[client.container].limits
                replies = handle(client, message, limits, self._gpus, now)
            except protocol.ProtocolError as err:
                self.bad_messages += 1
                log.info("%s: closing a connection: %s", client.container, err)
                self._close(client, now)
                return
            except Exception:  # a bug here must not take the other containers down
                log.exception("%s: closing a connection after an error", client.container)
                self._close(client, now)
                return
            for reply in replies:
                self._send(client, reply, now)

    def _send(self, client: Client, data: bytes, now: int) -> None:
        """Send one packet without blocking; a connection that cannot take it is closed."""
        if client.closed:
            return
        try:
            client.sock.send(data)
        except OSError as err:  # BlockingIOError: it does not read its messages
            log.info("%s: closing a connection that cannot be sent to: %s", client.container, err)
            self._close(client, now)

    def _close(self, client: Client, now: int) -> None:
        """Close a connection; its GPUs see it gone."""
        if client.closed:
            return
        client.closed = True
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(client.sock)
        client.sock.close()
        for uuid in client.devs.values():
            gpu = self._gpus.get(uuid)
            if gpu is not None:
                gpu.gone(client, now)
        container = self._containers.get(client.container)
        if container is not None:
            container.clients.discard(client)

    # --- scheduling ------------------------------------------------------------------------

    def _check_drains(self, now: int) -> None:
        """A process that owes a DONE but is stopped or dead is drained as far as it can be."""
        for gpu in self._gpus.values():
            for client in gpu.draining():
                if client.peer is not None and halted(client.peer):
                    gpu.stopped(client, now)

    def _step(self, now: int) -> None:
        """Step every GPU and send its orders, again while sending closed connections."""
        for _ in range(MAX_STEP_ROUNDS):
            sent = False
            for uuid, gpu in list(self._gpus.items()):
                for client, order in gpu.step(now):
                    sent = True
                    if not client.closed:
                        packet = _packet(client, uuid, order, gpu.grant_work_ns(), gpu.sharers())
                        self._send(client, packet, now)
            if not sent:
                return

    def _poll_unmanaged(self, now: int) -> None:
        """Publish the hold logs and connections to the NVML thread, and apply its latest
        report: each GPU's unmanaged load and probe, out-of-turn charges, the host view and
        the levers on flagged containers. Nothing here waits for NVML."""
        if self._source is None:
            return
        peers: dict[int, str] = {}
        gpus: dict[str, GpuSnapshot] = {}
        for container in self._containers.values():
            for client in container.clients:
                if client.peer is not None:
                    peers[client.peer.pid] = container.name
        for uuid, gpu in self._gpus.items():
            managed = {
                client.peer.pid
                for container in self._containers.values()
                for client in container.clients
                if client.peer is not None and uuid in client.devs.values()
            }
            holds = tuple(gpu.holds_since(now - HOLD_LOOKBACK_NS, now))
            gpus[uuid] = GpuSnapshot(holds, frozenset(managed), tuple(gpu.containers))
        offset = now - time.time_ns()
        self._sampler.publish(Snapshot(now, offset, now - HOLD_LOOKBACK_NS, gpus, peers))
        report = self._sampler.take()
        if report is None:
            return
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
        for pid in self._levers.set_targets(report.targets):
            log.warning("pid %d killed (--enforce): out-of-turn work", pid)

    def _follow(self, now: int) -> None:
        """Stop flagged containers outside their turns, continue them in their turns; the
        connections of those stopped now count as wanting (a stopped process cannot say so)."""
        holding = {gpu.holder for gpu in self._gpus.values() if gpu.holder is not None}
        for name in self._levers.follow(holding):
            container = self._containers.get(name)
            for client in container.clients if container else ():
                for uuid in client.devs.values():
                    if uuid in self._gpus:
                        self._gpus[uuid].want(client, now)

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


def _packet(client: Client, uuid: str, order: Order, budget_ns: int, sharers: int) -> bytes:
    """The GRANT (with the work budget of a grant and how many processes split it) or REVOKE
    packet of `order`, for the client's index of the GPU."""
    dev = next(index for index, known in client.devs.items() if known == uuid)
    if order.kind == "grant":
        return protocol.grant(dev, order.epoch, order.share, budget_ns, sharers)
    return protocol.revoke(dev, order.epoch)
