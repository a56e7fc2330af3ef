"""Removing container directories that are no longer needed: one loop, one judge per source.

Each part that makes container directories (meta.json "source") says when one of its own is
stale; this module lists the directories, asks the judge of each one's source, and removes
those judged stale. Directories of a source with no judge are never touched.

A container can put anything in its directory. meta.json is read with `read_meta` (a plain,
small JSON object, known fields of the right type, else {}), and a judge that fails on an
entry keeps that entry and goes on with the others: bad files never stop the loop, and never
get a directory removed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cgpu.core.containers import list_container_dirs, read_meta, remove_container_dir

log = logging.getLogger(__name__)


@dataclass
class Entry:
    """One container directory and its meta.json."""

    path: Path
    meta: dict[str, Any]

    @property
    def key(self) -> str:
        """The directory's name."""
        return self.path.name

    @property
    def source(self) -> str:
        """Who made it ("" when meta.json does not say)."""
        value = self.meta.get("source")
        return value if isinstance(value, str) else ""


# A judge returns why a directory is stale, or None to keep it.
Judge = Callable[[Entry], str | None]


def entries(state_dir: str | os.PathLike[str], source: str | None = None) -> list[Entry]:
    """The container directories under `state_dir` (only `source`'s, when given)."""
    found = [Entry(path, read_meta(path)) for path in list_container_dirs(state_dir)]
    return [e for e in found if source is None or e.source == source]


def sweep(
    state_dir: str | os.PathLike[str],
    judges: Mapping[str, Judge],
    found: Iterable[Entry] | None = None,
) -> list[str]:
    """Remove every directory its source's judge calls stale; returns their keys.

    `found` is the listing to judge (default: a fresh one of `state_dir`).
    """
    removed = []
    for entry in entries(state_dir) if found is None else found:
        judge = judges.get(entry.source)
        try:
            reason = judge(entry) if judge is not None else None
            if reason and remove_container_dir(state_dir, entry.key):
                log.info("removed container directory %s: %s", entry.key, reason)
                removed.append(entry.key)
        except Exception:  # one odd directory must not stop the clean-up of the others
            log.exception("cannot judge or remove container directory %s; kept", entry.key)
    return removed
