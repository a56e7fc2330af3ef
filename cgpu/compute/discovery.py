"""Finding the containers that take turns on a GPU: `DIR/*/cgpu.conf`, re-read when it changes.

A container is its directory. A GPU where some container has a compute line is *gated*: every
container whose config lists that GPU takes turns on it, those without a compute line there as
best effort (percent 0, `BEST_EFFORT`), at the priority the host recorded for its pod in
meta.json (`compute_priority`; normal without one). A GPU where nobody has one is left alone. A
malformed config is logged once per version of the file, counted, and read as having no GPUs;
nothing here raises for what a file holds.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from cgpu.core.computestatus import BEST_EFFORT
from cgpu.core.config import ConfigError, load_compute_lines, load_config
from cgpu.core.containers import META_COMPUTE_PRIORITY, read_meta
from cgpu.core.layout import CONFIG_NAME, META_NAME

from .charging import check_limit
from .turnstate import NORMAL

log = logging.getLogger(__name__)

Limits = dict[str, tuple[int, str, str]]  # {GPU uuid: (percent, policy, priority)}
Stamp = tuple[int, int, int, int]  # (device, inode, mtime ns, size) of a config file
Parsed = tuple[frozenset[str], Limits]  # a config's GPUs, and its compute lines
NO_GPUS: Parsed = (frozenset(), {})


class Discovery:
    """Scans container roots, parsing each config only when its file changed."""

    def __init__(self, roots: Iterable[Path]) -> None:
        self.roots = tuple(roots)
        self.bad_configs = 0
        self._seen: dict[Path, tuple[Stamp, Parsed]] = {}
        self._meta: dict[Path, tuple[Stamp, str]] = {}

    def scan(self) -> dict[Path, Limits]:
        """{container directory: what it takes turns with on each gated GPU}, for those that
        take turns on at least one: its compute lines, and best effort on the gated GPUs it
        has no line for. OSError when a root cannot be listed for a reason other than its
        absence."""
        directories = list(self._directories())
        for gone in set(self._seen) - set(directories):
            del self._seen[gone]
        for gone in set(self._meta) - set(directories):
            del self._meta[gone]
        found = {directory: self._config(directory) for directory in directories}
        gated = {uuid for _, limits in found.values() for uuid in limits}
        turns = {}
        for directory, (gpus, limits) in found.items():
            best_effort = gpus & gated - limits.keys()
            priority = self._priority(directory) if best_effort else NORMAL
            turns[directory] = {
                **limits,
                **{uuid: (0, BEST_EFFORT, priority) for uuid in best_effort},
            }
        return {directory: limits for directory, limits in turns.items() if limits}

    def _directories(self) -> Iterable[Path]:
        """The container directories under every root (hidden ones, such as staging, skipped)."""
        for root in self.roots:
            try:
                entries = sorted(os.scandir(root), key=lambda e: e.name)
            except (FileNotFoundError, NotADirectoryError) as err:
                log.debug("cannot list %s: %s", root, err)  # no containers there (yet)
                continue
            # Any other error (EMFILE, EIO) says nothing of the containers: it reaches scan's
            # caller, which keeps what it knows rather than dropping every container.
            for entry in entries:
                if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False):
                    yield Path(entry.path)

    def _priority(self, directory: Path) -> str:
        """The priority of a best-effort container's turns: meta.json's `compute_priority` (the
        host's record of its pod's), normal without one; re-read when the file changes."""
        path = directory / META_NAME
        try:
            info = os.stat(path, follow_symlinks=False)
        except OSError:
            return NORMAL
        stamp = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)
        cached = self._meta.get(directory)
        if cached and cached[0] == stamp:
            return cached[1]
        priority = read_meta(directory).get(META_COMPUTE_PRIORITY) or NORMAL
        self._meta[directory] = (stamp, priority)
        return priority

    def _config(self, directory: Path) -> Parsed:
        """The directory's GPUs and compute lines, from the cache while its config is
        unchanged."""
        path = directory / CONFIG_NAME
        try:
            info = os.stat(path, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            self._seen.pop(directory, None)
            return NO_GPUS
        except OSError:  # a transient failure: what was known stands
            cached = self._seen.get(directory)
            return cached[1] if cached else NO_GPUS
        stamp = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)
        cached = self._seen.get(directory)
        if cached and cached[0] == stamp:
            return cached[1]
        try:
            regular = stat.S_ISREG(info.st_mode)
            parsed = self._parse(path) if regular else self._bad(path, "not a file")
        except OSError:  # cannot be read now (EMFILE): what was known stands
            return cached[1] if cached else NO_GPUS
        self._seen[directory] = (stamp, parsed)
        return parsed

    def _parse(self, path: Path) -> Parsed:
        """The GPUs and compute lines of one config (the shim's parser); none, and counted, if
        malformed. OSError when the file cannot be opened now for a passing reason (EMFILE,
        EIO)."""
        try:
            os.close(os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW))  # open it can
            gpus = frozenset(load_config(path))
            lines = load_compute_lines(path).items()
            limits = {uuid: (line.percent, line.policy, line.priority) for uuid, line in lines}
            for percent, policy, priority in limits.values():
                check_limit(percent, policy, priority)
        except FileNotFoundError:
            return NO_GPUS
        except OSError as err:
            if err.errno != errno.ELOOP:
                raise
            return self._bad(path, "a symbolic link")
        except (ConfigError, ValueError) as err:
            return self._bad(path, str(err))
        return gpus | limits.keys(), limits

    def _bad(self, path: Path, reason: str) -> Parsed:
        """Log and count a malformed config; it has no GPUs."""
        self.bad_configs += 1
        log.warning("malformed %s, no compute limit taken from it: %s", path, reason)
        return NO_GPUS
