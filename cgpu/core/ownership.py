"""One account per GPU on a node: the device plugin or the DRA driver hands a GPU out, never both.

Each GPU of a node is owned by at most one of the two daemons, and a daemon offers only the
GPUs it owns, so the memory and compute handed out on a GPU never pass what it has. A daemon
owns a GPU while it holds an exclusive `flock` on `<state-dir>/owners/<uuid>.lock`; the kernel
drops the lock when the process dies (SIGKILL included), so a dead owner never blocks the
other for good. Beside the lock, `<uuid>.json` names the owner (component, pid, node, since)
for the other daemon's messages and for operators.

A free GPU is not taken while container directories of the other daemon still name it in
their `cgpu.conf` (its containers still run there, on slices it gave out): the other daemon
removes them as those containers go. A directory whose `cgpu.conf` cannot be read counts as
naming every GPU.

The state directory is the host's (containers never see it writable), so its records are
trusted as far as their shape is checked.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from cgpu.core.config import load_config
from cgpu.core.containers import list_container_dirs, read_meta
from cgpu.core.files import atomic_write
from cgpu.core.layout import CONFIG_NAME, SOURCE_DEVICE_PLUGIN, SOURCE_DRA, UUID_RE

log = logging.getLogger(__name__)

OWNERS_SUBDIR = "owners"
COMPONENTS = {
    SOURCE_DEVICE_PLUGIN: "device plugin (cgpu device-plugin)",
    SOURCE_DRA: "DRA driver (cgpu dra-driver)",
}
OTHER = {SOURCE_DEVICE_PLUGIN: SOURCE_DRA, SOURCE_DRA: SOURCE_DEVICE_PLUGIN}
GPUS_FLAG = "--gpus"
_RECORD_LIMIT = 4096
_LATEST = 1e11  # a record's "since" is a time before this (year 5138); NaN is not


class OwnershipError(Exception):
    """This daemon owns no GPU of the node; the message says who does and why."""


class GpuLike(Protocol):
    """What ownership needs of a GPU (cgpu.core.gpus.GPU and the DRA driver's GpuInfo)."""

    @property
    def index(self) -> int: ...

    @property
    def uuid(self) -> str: ...


G = TypeVar("G", bound=GpuLike)


@dataclass(frozen=True)
class Owner:
    """The daemon that owns a GPU, as its record names it."""

    component: str
    pid: int
    node: str
    since: float

    def describe(self) -> str:
        """ "the DRA driver (cgpu dra-driver), pid 42 on node n1, since 2026-11-26T16:00:00Z"."""
        name = COMPONENTS.get(self.component, repr(self.component))
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since))
        return f"the {name}, pid {self.pid} on node {self.node}, since {when}"


@dataclass(frozen=True)
class Skipped:
    """A GPU this daemon does not own, and why."""

    index: int
    uuid: str
    reason: str

    def __str__(self) -> str:
        return f"GPU {self.index} ({self.uuid}) {self.reason}"


def owners_dir(state_dir: str | os.PathLike[str]) -> Path:
    """Where the locks and records live."""
    return Path(state_dir) / OWNERS_SUBDIR


def _paths(state_dir: str | os.PathLike[str], uuid: str) -> tuple[Path, Path]:
    if not UUID_RE.match(uuid):
        raise ValueError(f"invalid GPU UUID {uuid!r}")
    base = owners_dir(state_dir)
    return base / f"{uuid}.lock", base / f"{uuid}.json"


def read_owner(state_dir: str | os.PathLike[str], uuid: str) -> Owner | None:
    """The GPU's owner record, or None when there is none or it is malformed.

    A record outlives a crashed owner: only the lock says whether its owner still runs.
    """
    _, record = _paths(state_dir, uuid)
    try:
        with open(record, "rb") as handle:
            data = json.loads(handle.read(_RECORD_LIMIT + 1)[:_RECORD_LIMIT])
        owner = Owner(
            str(data["component"]), int(data["pid"]), str(data["node"]), float(data["since"])
        )
    except (OSError, ValueError, TypeError, KeyError, OverflowError):
        return None
    if not 0 <= owner.since < _LATEST or len(owner.node) > 253:
        return None
    return owner


def containers_on(state_dir: str | os.PathLike[str], uuid: str, source: str) -> list[str]:
    """Keys of `source`'s container directories that name the GPU (or cannot be read)."""
    found = []
    for path in list_container_dirs(state_dir):
        if read_meta(path).get("source") != source:
            continue
        try:
            named = uuid in load_config(path / CONFIG_NAME)
        except Exception:  # a config this cannot read may name it: keep the GPU
            named = True
        if named:
            found.append(path.name)
    return found


def parse_selection(text: str | None) -> frozenset[str] | None:
    """`--gpus`: "" or "all" selects every GPU (None), else comma-separated indexes or UUIDs."""
    if text is None or text.strip() in ("", "all"):
        return None
    items = frozenset(item.strip() for item in text.split(",") if item.strip())
    bad = sorted(i for i in items if not (i.isdigit() or UUID_RE.match(i)))
    if not items or bad:
        raise ValueError(f"{text!r}: expected 'all', or GPU indexes or UUIDs separated by commas")
    return items


def gpus_argument(text: str) -> frozenset[str] | None:
    """`--gpus` as an argparse type (a bad value is a usage error naming it)."""
    try:
        return parse_selection(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


GPUS_HELP = (
    "the GPUs this daemon may offer: 'all' (default), or NVML indexes or UUIDs separated by "
    "commas. Each GPU is offered by one of the device plugin and the DRA driver at a time; a "
    "GPU the other one owns, or where its containers still run, is skipped with a log line"
)


def selected(gpu: GpuLike, selection: frozenset[str] | None) -> bool:
    """Whether `--gpus` names the GPU (by NVML index or UUID)."""
    return selection is None or str(gpu.index) in selection or gpu.uuid in selection


class Ownership:
    """The GPUs this process owns: each lock stays held until `release` or the process ends."""

    def __init__(self, state_dir: str | os.PathLike[str], component: str, node: str) -> None:
        if component not in OTHER:
            raise ValueError(f"unknown component {component!r}")
        self.state_dir = Path(state_dir)
        self.component = component
        self.node = node
        self._fds: dict[str, int] = {}

    @property
    def owned(self) -> list[str]:
        """UUIDs of the GPUs held."""
        return list(self._fds)

    def try_take(self, uuid: str) -> str | None:
        """Take one GPU; returns None when it is (now) held, else why not."""
        if uuid in self._fds:
            return None
        lock, record = _paths(self.state_dir, uuid)
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            owner = read_owner(self.state_dir, uuid)
            return f"is owned by {owner.describe()}" if owner else "is owned by another process"
        other = OTHER[self.component]
        busy = containers_on(self.state_dir, uuid, other)
        if busy:
            os.close(fd)  # the lock goes with it
            shown = ", ".join(busy[:5]) + (f" and {len(busy) - 5} more" if len(busy) > 5 else "")
            return (
                f"still has containers of the {COMPONENTS[other]}: "
                f"directories {shown} under {self.state_dir / 'containers'}"
            )
        mine = {"component": self.component, "pid": os.getpid(), "node": self.node}
        try:
            atomic_write(record, json.dumps({**mine, "since": time.time()}) + "\n")
        except OSError:
            os.close(fd)
            raise
        self._fds[uuid] = fd
        return None

    def take(self, gpus: Sequence[G], selection: frozenset[str] | None) -> list[Skipped]:
        """Take every selected GPU that can be taken; returns the others with the reason."""
        skipped = []
        for gpu in gpus:
            if not selected(gpu, selection):
                reason: str | None = f"is not in {GPUS_FLAG}"
            else:
                reason = self.try_take(gpu.uuid)
            if reason is not None:
                skipped.append(Skipped(gpu.index, gpu.uuid, reason))
        return skipped

    def take_free(self, gpus: Sequence[G], selection: frozenset[str] | None) -> list[G]:
        """Retry the selected GPUs not held yet; returns those taken now (logged)."""
        before = set(self._fds)
        self.take([g for g in gpus if g.uuid not in before], selection)
        taken = [g for g in gpus if g.uuid in self._fds and g.uuid not in before]
        for gpu in taken:
            log.info("GPU %d (%s) is free now: offering it", gpu.index, gpu.uuid)
        return taken

    def release(self, uuids: Iterable[str] | None = None) -> None:
        """Give GPUs up (all by default): the record goes, then the lock."""
        for uuid in list(self._fds if uuids is None else uuids):
            fd = self._fds.pop(uuid, None)
            if fd is None:
                continue
            try:
                _paths(self.state_dir, uuid)[1].unlink(missing_ok=True)
            finally:
                os.close(fd)


def claim(
    state_dir: str | os.PathLike[str],
    component: str,
    node: str,
    gpus: Sequence[G],
    selection: frozenset[str] | None = None,
) -> tuple[Ownership, list[G], list[Skipped]]:
    """Own what this daemon may of the node's GPUs, logging each one skipped.

    Returns the ownership (held for the process's life), the GPUs owned, in the given order,
    and those skipped. Raises OwnershipError, naming who holds them, when the node has GPUs
    and none is owned; a node without GPUs is no error.
    """
    if selection is not None:
        known = {str(g.index) for g in gpus} | {g.uuid for g in gpus}
        for item in sorted(selection - known):
            log.warning("%s names %s, which is no GPU of this node", GPUS_FLAG, item)
    ownership = Ownership(state_dir, component, node)
    skipped = ownership.take(gpus, selection)
    for item in skipped:
        log.warning("not offering %s", item)
    owned = [g for g in gpus if g.uuid in ownership.owned]
    if gpus and not owned:
        raise OwnershipError(refusal(component, node, skipped))
    return ownership, owned, skipped


def refusal(component: str, node: str, skipped: Sequence[Skipped]) -> str:
    """Why `component` cannot start: every GPU's owner or reason, and what to do."""
    name = COMPONENTS[component]
    lines = "; ".join(str(s) for s in skipped)
    return (
        f"the {name} owns no GPU on node {node}, so it would offer nothing: {lines}. "
        f"A GPU is handed out by one of the device plugin and the DRA driver at a time: "
        f"stop the other one, or restart it with {GPUS_FLAG} naming only the GPUs it keeps "
        f"(docs/operations-dra.md, 'Migrating a node')"
    )
