"""Parsed files of container directories, re-read only when they change.

A pass over the state dir (the exporter's scrape, the compute arbiter's look at its containers)
parses each container's meta.json (and the exporter its cgpu.conf) once, then again only when
the file's type, inode, size or mtime changes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from cgpu.core.config import ConfigError
from cgpu.core.containers import MetaError, load_meta
from cgpu.core.layout import META_NAME

Stamp = tuple[int, int, int, int]


def _stamp(path: str) -> Stamp | None:
    """What changes when a file is replaced or rewritten; None when there is no such file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns)


class FileCache:
    """Parsed files, re-read only when their stamp (type, inode, size, mtime) changes."""

    def __init__(self, name: str, parse: Callable[[str], Any]) -> None:
        self._name = name
        self._parse = parse
        self._entries: dict[str, tuple[Stamp, Any]] = {}

    def get(self, container_dir: str) -> Any:
        """The parsed file (None when absent); raises what `parse` raises, and caches that too."""
        stamp = _stamp(os.path.join(container_dir, self._name))
        if stamp is None:
            self._entries.pop(container_dir, None)
            return None
        cached = self._entries.get(container_dir)
        if cached is None or cached[0] != stamp:
            try:
                value: Any = self._parse(container_dir)
            except (MetaError, ConfigError) as exc:
                value = exc
            cached = (stamp, value)
            self._entries[container_dir] = cached
        if isinstance(cached[1], Exception):
            raise cached[1]
        return cached[1]

    def retain(self, container_dirs: list[str]) -> None:
        """Forget the directories that are gone."""
        keep = set(container_dirs)
        for path in [p for p in self._entries if p not in keep]:
            del self._entries[path]


class MetaCache(FileCache):
    """meta.json contents, re-read only when the file changes (see `load_meta`)."""

    def __init__(self) -> None:
        super().__init__(META_NAME, load_meta)
