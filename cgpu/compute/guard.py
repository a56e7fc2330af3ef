"""What one container may cost the arbiter: connections, packets per second, penalties, logs.

Nothing a container sends may cost the other containers their turns. So each container has
- a cap on its connections (a process needs one; more are closed at once),
- a packet bucket (PACKET_RATE a second, PACKET_BURST at once) and a budget per pass of the loop
  (PASS_PACKETS): the loop serves containers in turn and reads at most that many of a
  container's packets before the next container's; a container whose bucket is empty is not
  read at all until it refills (its packets wait in its own sockets: it is slowed, not the
  arbiter);
- a penalty: a connection that sends a malformed packet, or more than CONNECTION_RATE packets
  in a second (a shim sends a few hundred at most), is closed; past FREE_OFFENCES of those, its
  container's socket accepts nothing for a while (PENALTY_NS, doubling at each offence up to
  MAX_PENALTY_NS, forgiven after FORGIVE_NS without one), so a client that reconnects to flood
  again waits in the backlog.
`RateLimitedLog` says what happened at most once per LOG_EVERY_NS per key, with a count of what it
did not say.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

MS = 1_000_000
SECOND = 1_000_000_000
MAX_CONNECTIONS = 64  # per container: a process needs one
PACKET_RATE = 2000  # a container's packets a second, over all its connections
PACKET_BURST = 500
PASS_PACKETS = 64  # a container's packets read in one pass of the loop
CONNECTION_RATE = 3000  # one connection's packets in a second: more and it is closed
ACCEPTS_PER_PASS = 8  # a container's new connections taken in one pass
FREE_OFFENCES = 4  # misbehaving connections forgiven before the socket is paused
PENALTY_NS = 50 * MS
MAX_PENALTY_NS = 1 * SECOND
FORGIVE_NS = 10 * SECOND
LOG_EVERY_NS = 10 * SECOND


@dataclass
class Bucket:
    """A token bucket: `rate` a second, at most `burst` at once."""

    rate: float
    burst: float
    tokens: float
    stamp: int

    def level(self, now: int) -> float:
        """The tokens at `now` (refilled since the last look)."""
        if now > self.stamp:
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate / SECOND)
            self.stamp = now
        return self.tokens

    def take(self, count: int, now: int) -> None:
        """Spend `count` tokens (the level may go below zero: it is repaid before the next)."""
        self.level(now)
        self.tokens -= count

    def ready_at(self, now: int) -> int:
        """When the bucket holds a whole token again."""
        missing = 1.0 - self.level(now)
        return now if missing <= 0 else now + int(missing * SECOND / self.rate) + 1


def _bucket() -> Bucket:
    return Bucket(PACKET_RATE, PACKET_BURST, PACKET_BURST, 0)


@dataclass
class ContainerGuard:
    """One container's allowances."""

    max_connections: int = MAX_CONNECTIONS
    packets: Bucket = field(default_factory=_bucket)
    paused_until: int = 0  # its socket accepts nothing before this
    penalty_ns: int = 0
    last_offence: int = 0
    offences: int = 0

    def budget(self, now: int) -> int:
        """How many of its packets this pass may read."""
        return max(0, min(PASS_PACKETS, int(self.packets.level(now))))

    def offend(self, now: int) -> int:
        """A connection of the container misbehaved: the pause it earns (its end). The first
        FREE_OFFENCES since the last quiet FORGIVE_NS cost nothing (a shim with a bug), then
        PENALTY_NS, doubling up to MAX_PENALTY_NS."""
        if now - self.last_offence >= FORGIVE_NS:
            self.offences = 0
        self.last_offence = now
        self.offences += 1
        if self.offences > FREE_OFFENCES:
            doublings = min(self.offences - FREE_OFFENCES - 1, 16)
            self.penalty_ns = min(MAX_PENALTY_NS, PENALTY_NS << doublings)
            self.paused_until = max(self.paused_until, now + self.penalty_ns)
        return self.paused_until


@dataclass
class ConnectionMeter:
    """One connection's packets in the current second."""

    window_start: int = 0
    count: int = 0

    def count_one(self, now: int) -> bool:
        """Count a packet; False once the connection has sent more than CONNECTION_RATE in its
        current second."""
        if now - self.window_start >= SECOND:
            self.window_start, self.count = now, 0
        self.count += 1
        return self.count <= CONNECTION_RATE


class RateLimitedLog:
    """A logger that says each kind of thing at most once per LOG_EVERY_NS."""

    def __init__(self, logger: logging.Logger, every_ns: int = LOG_EVERY_NS) -> None:
        self._log = logger
        self._every = every_ns
        self._last: dict[str, int] = {}
        self._quiet: dict[str, int] = {}

    def say(self, key: str, now: int, level: int, message: str, *args: object) -> None:
        """Log `message` unless `key` was logged within the interval; then count it."""
        last = self._last.get(key)
        if last is not None and now - last < self._every:
            self._quiet[key] = self._quiet.get(key, 0) + 1
            return
        quiet = self._quiet.pop(key, 0)
        self._last[key] = now
        suffix = f" ({quiet} more like it not logged)" if quiet else ""
        self._log.log(level, message + suffix, *args)

    def forget(self, prefix: str) -> None:
        """Drop the keys that start with `prefix` (a container that has gone)."""
        for key in [k for k in self._last if k.startswith(prefix)]:
            del self._last[key]
            self._quiet.pop(key, None)
