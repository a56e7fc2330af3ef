"""The arbiter's wire format: one 64-byte little-endian message per SOCK_SEQPACKET packet.

`struct { uint32 type; uint32 dev; uint64 a; uint64 b; char text[40]; }`. The client (one
connection per process of a container) speaks first; see the constants for what a and b mean.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from cgpu.core.layout import UUID_RE

FORMAT = struct.Struct("<IIQQ40s")
SIZE = FORMAT.size  # 64
VERSION = 1
MAX_DEVICES = 16  # ledger device indices 0-15
TEXT_SIZE = 40

# Client -> arbiter.
HELLO = 1  # a = protocol version, b = the client's own pid (informational)
DEV = 2  # dev = ledger index, text = GPU UUID
WANT = 3  # a thread waits to launch on dev
DONE = 4  # a = epoch: gate closed and work drained after REVOKE; b = 1: a thread waits (a WANT)
IDLE = 5  # granted, but no launch for a while
BUSY = 6  # launching again after IDLE
SPENT = 7  # a = epoch, b = work queued (ns, the client's estimate): the grant's budget is used
# Arbiter -> client.
# a = epoch, b = the container's share over the last ~1 s in 1/100 percent, text = the grant's
# work budget (ns, uint64; 0 or absent: none), then how many busy processes the container has
# (uint32; 0 or absent: one): with several, each counts the budget whatever its kernels' length;
# then the arbiter's features (uint32; 0 or absent: none, as from an older arbiter)
GRANT = 10
REVOKE = 11  # a = epoch
REFUSE = 12  # text = reason

CLIENT_TYPES = frozenset({HELLO, DEV, WANT, DONE, IDLE, BUSY, SPENT})


class ProtocolError(ValueError):
    """A malformed packet: the arbiter closes the connection that sent it."""


class Message(NamedTuple):
    """One decoded packet."""

    type: int
    dev: int = 0
    a: int = 0
    b: int = 0
    text: bytes = b""


def pack(message: Message) -> bytes:
    """The 64 bytes of `message` (text NUL padded, cut at 40 bytes)."""
    return FORMAT.pack(message.type, message.dev, message.a, message.b, message.text[:TEXT_SIZE])


def unpack_client(packet: bytes) -> Message:
    """Decode a client's packet; ProtocolError for a wrong size, type or device index."""
    if len(packet) != SIZE:
        raise ProtocolError(f"packet of {len(packet)} bytes, expected {SIZE}")
    message = Message(*FORMAT.unpack(packet))
    if message.type not in CLIENT_TYPES:
        raise ProtocolError(f"unknown message type {message.type}")
    if message.dev >= MAX_DEVICES:
        raise ProtocolError(f"device index {message.dev} out of range")
    if message.type == DONE and message.b > 1:
        raise ProtocolError(f"DONE with b = {message.b}: 0, or 1 for a thread that waits")
    return message


def text_uuid(text: bytes) -> str:
    """The UUID in a DEV message's text (up to the first NUL); ProtocolError if malformed."""
    raw = text.split(b"\0", 1)[0]
    try:
        uuid = raw.decode("ascii")
    except UnicodeDecodeError:
        raise ProtocolError("DEV text is not ASCII") from None
    if not UUID_RE.match(uuid):
        raise ProtocolError(f"DEV text {uuid!r} is not a GPU UUID")
    return uuid


BUDGET = struct.Struct("<QII")  # the grant's work (ns), the container's busy processes, features
FEATURE_DONE_WANTS = 1  # a DONE's b = 1 is read as a WANT: the shim need not send both
FEATURES = FEATURE_DONE_WANTS
# This grant's budget is counted however many launches it admits (beside a `high` container,
# what the holder queues must stay what the arbiter admitted); without it a process alone
# counts only a budget of a few launches (short kernels: the REVOKE ends the turn soon enough).
GRANT_COUNTED = 2


def grant(
    dev: int, epoch: int, share: int, budget_ns: int = 0, sharers: int = 1, counted: bool = False
) -> bytes:
    """GRANT for `dev` in `epoch`; share in 1/100 percent; the work a grant admits (ns), how
    many busy processes the container has, and whether the shim must count that work however
    many launches it is (`GRANT_COUNTED`)."""
    features = FEATURES | (GRANT_COUNTED if counted else 0)
    budget = BUDGET.pack(budget_ns, max(1, sharers), features)
    return pack(Message(GRANT, dev, epoch, share, budget))


def revoke(dev: int, epoch: int) -> bytes:
    """REVOKE of the grant of `epoch` on `dev`."""
    return pack(Message(REVOKE, dev, epoch))


def refuse(dev: int, reason: str) -> bytes:
    """REFUSE for `dev` with a short reason."""
    return pack(Message(REFUSE, dev, text=reason.encode("ascii", "replace")))
