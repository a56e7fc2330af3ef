"""What the arbiter's thread hands the NVML thread (sampler.py), built from its own state.

The snapshot copies each GPU's recent holds, the pids of the connected processes that use it
(and of the unhooked ones in turns), and which container each connected pid is; the NVML thread
never reads the arbiter's objects.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from cgpu.core.computestatus import BEST_EFFORT

from .clients import Client
from .discovery import Limits
from .sampler import HOLD_LOOKBACK_NS, GpuSnapshot, Proc, Snapshot
from .schedule import GpuSchedule


def snapshot(
    clients: Mapping[str, Iterable[Client]],
    gpus: Mapping[str, GpuSchedule[Client]],
    in_turns: Mapping[str, set[int]],
    now: int,
) -> Snapshot:
    """The snapshot at `now` (arbiter ns) of each container's connections (`clients`), each
    GPU's schedule and, per GPU, the pids of the unhooked processes in turns."""
    peers: dict[int, str] = {}
    users: dict[str, set[int]] = {uuid: set(in_turns.get(uuid, ())) for uuid in gpus}
    for name, conns in clients.items():
        for client in conns:
            if client.peer is None:
                continue
            peers[client.peer.pid] = name
            for uuid in client.devs.values():
                if uuid in users:
                    users[uuid].add(client.peer.pid)
    frozen = {
        uuid: GpuSnapshot(
            tuple(gpu.holds_since(now - HOLD_LOOKBACK_NS, now)),
            frozenset(users[uuid]),
            tuple(gpu.containers),
        )
        for uuid, gpu in gpus.items()
    }
    offset = now - time.time_ns()
    return Snapshot(now, offset, now - HOLD_LOOKBACK_NS, frozen, peers)


def best_effort_only(
    found: Mapping[tuple[str, str], list[Proc]], limits: Mapping[str, Limits]
) -> dict[tuple[str, str], list[Proc]]:
    """The unhooked processes (by GPU and container) of containers that are best effort on
    that GPU (a limited container's are its own affair: the host view judges them)."""
    out = {}
    for (uuid, name), procs in found.items():
        limit = limits.get(name, {}).get(uuid)
        if limit is not None and limit[1] == BEST_EFFORT:
            out[uuid, name] = procs
    return out
