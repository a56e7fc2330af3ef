"""Finding the containers that have a compute limit: `DIR/*/cgpu.conf`, re-read when it changes.

A container is its directory. A malformed config is logged once per version of the file,
counted, and read as having no compute lines; nothing here raises for what a file holds.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from cgpu.core.config import ConfigError, load_compute_lines
from cgpu.core.layout import CONFIG_NAME

from .schedule import check_limit

log = logging.getLogger(__name__)

Limits = dict[str, tuple[int, str, str]]  # {GPU uuid: (percent, policy, priority)}
Stamp = tuple[int, int, int, int]  # (device, inode, mtime ns, size) of a config file


class Discovery:
    """Scans container roots, parsing each config only when its file changed."""

    def __init__(self, roots: Iterable[Path]) -> None:
        self.roots = tuple(roots)
        self.bad_configs = 0
        self._seen: dict[Path, tuple[Stamp, Limits]] = {}

    def scan(self) -> dict[Path, Limits]:
        """{container directory: its compute limits}, for those with at least one. OSError
        when a root cannot be listed for a reason other than its absence."""
        directories = list(self._directories())
        for gone in set(self._seen) - set(directories):
            del self._seen[gone]
        found = {directory: self._limits(directory) for directory in directories}
        return {directory: limits for directory, limits in found.items() if limits}

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

    def _limits(self, directory: Path) -> Limits:
        """The directory's compute limits, from the cache while its config is unchanged."""
        path = directory / CONFIG_NAME
        try:
            info = os.stat(path, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            self._seen.pop(directory, None)
            return {}
        except OSError:  # a transient failure: what was known stands
            cached = self._seen.get(directory)
            return cached[1] if cached else {}
        stamp = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)
        cached = self._seen.get(directory)
        if cached and cached[0] == stamp:
            return cached[1]
        try:
            regular = stat.S_ISREG(info.st_mode)
            limits = self._parse(path) if regular else self._bad(path, "not a file")
        except OSError:  # cannot be read now (EMFILE): what was known stands
            return cached[1] if cached else {}
        self._seen[directory] = (stamp, limits)
        return limits

    def _parse(self, path: Path) -> Limits:
        """The compute lines of one config (the shim's parser); {} and counted if malformed.
        OSError when the file cannot be opened now for a passing reason (EMFILE, EIO)."""
        try:
            os.close(os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW))  # open it can
            lines = load_compute_lines(path).items()
            limits = {uuid: (line.percent, line.policy, line.priority) for uuid, line in lines}
            for percent, policy, priority in limits.values():
                check_limit(percent, policy, priority)
        except FileNotFoundError:
            return {}
        except OSError as err:
            if err.errno != errno.ELOOP:
                raise
            return self._bad(path, "a symbolic link")
        except (ConfigError, ValueError) as err:
            return self._bad(path, str(err))
        return limits

    def _bad(self, path: Path, reason: str) -> Limits:
        """Log and count a malformed config; it has no compute lines."""
        self.bad_configs += 1
        log.warning("malformed %s, no compute limit taken from it: %s", path, reason)
        return {}
