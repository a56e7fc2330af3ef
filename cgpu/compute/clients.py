"""One connected process: what it declared, and what its messages do to the GPU schedules.

A client speaks HELLO first, then DEV once per GPU it uses, then WANT/IDLE/BUSY/DONE/SPENT for those
GPUs. `handle` raises ProtocolError for anything malformed; the arbiter then closes the client.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from . import protocol
from .discovery import Limits
from .guard import ConnectionMeter
from .peer import Peer
from .schedule import GpuSchedule

REFUSE_REASON = "no compute limit on this GPU"
UNGATED_REASON = "nobody limits this GPU now"


@dataclass(eq=False)  # identity: a client is a connection
class Client:
    """A connection from one process of `container`."""

    sock: socket.socket
    container: str
    peer: Peer | None
    helloed: bool = False
    closed: bool = False
    devs: dict[int, str] = field(default_factory=dict)  # ledger index -> uuid, accepted ones
    declared: set[str] = field(default_factory=set)  # every uuid it sent DEV for
    released: set[int] = field(default_factory=set)  # indexes REFUSEd after they were accepted
    meter: ConnectionMeter = field(default_factory=ConnectionMeter)  # its packets a second

    def fileno(self) -> int:
        """The socket's descriptor (for selectors)."""
        return self.sock.fileno()


class Handled(NamedTuple):
    """What a message did: the replies (REFUSE) to send, and whether a GPU's schedule may have
    changed (False for HELLO and a WANT it knew: the arbiter need not step for them)."""

    replies: tuple[bytes, ...]
    changed: bool


UNCHANGED = Handled((), False)
CHANGED = Handled((), True)


def handle(
    client: Client,
    message: protocol.Message,
    limits: Limits,
    gpus: Mapping[str, GpuSchedule[Client]],
    now: int,
) -> Handled:
    """Apply one message; what it did. ProtocolError if malformed."""
    if not client.helloed:
        if message.type != protocol.HELLO or message.a != protocol.VERSION:
            raise protocol.ProtocolError("the first message must be HELLO of version 1")
        client.helloed = True
        return UNCHANGED
    if message.type == protocol.HELLO:
        raise protocol.ProtocolError("HELLO twice")
    if message.type == protocol.DEV:
        return _declare(client, message, limits, gpus, now)
    uuid = client.devs.get(message.dev)
    if uuid is None and message.dev in client.released:
        return UNCHANGED  # sent before it read the REFUSE: the GPU is no longer gated
    if uuid is None or uuid not in gpus:
        raise protocol.ProtocolError(f"device {message.dev} was not declared")
    gpu = gpus[uuid]
    if message.type == protocol.WANT:
        return CHANGED if gpu.want(client, now) else UNCHANGED
    if message.type == protocol.IDLE:
        gpu.idle(client, now)
    elif message.type == protocol.BUSY:
        gpu.busy(client)
    elif message.type == protocol.DONE:
        gpu.done(client, message.a, now)
        if message.b:  # and a thread waits: the turn's WANT, in the same message
            gpu.want(client, now)
    elif message.type == protocol.SPENT:
        gpu.spent(client, message.a, message.b, now)
    return CHANGED


def _declare(
    client: Client,
    message: protocol.Message,
    limits: Limits,
    gpus: Mapping[str, GpuSchedule[Client]],
    now: int,
) -> Handled:
    """DEV: bind a ledger index to a GPU with a limit, or REFUSE it."""
    uuid = protocol.text_uuid(message.text)
    if uuid in client.declared or message.dev in client.devs:
        raise protocol.ProtocolError(f"DEV for {uuid} or index {message.dev} twice")
    client.declared.add(uuid)
    if uuid not in limits or uuid not in gpus:
        return Handled((protocol.refuse(message.dev, REFUSE_REASON),), False)
    client.devs[message.dev] = uuid
    gpus[uuid].connect(client, client.container, now)  # a GRANT at once if its container holds
    return CHANGED
