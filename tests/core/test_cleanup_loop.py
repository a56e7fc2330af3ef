"""The one clean-up loop: each source's judge decides for that source's directories only."""

from __future__ import annotations

from pathlib import Path

from cgpu.core import cleanup
from cgpu.core.containers import containers_root, create_container_dir

LIMITS = {"GPU-5eed0000-0000-4000-8000-000000000000": 1 << 30}


def _make(state: Path, key: str, **meta: object) -> None:
    create_container_dir(state, key, LIMITS, meta)


def _left(state: Path) -> list[str]:
    return sorted(p.name for p in containers_root(state).iterdir())


def test_only_judged_sources_are_touched(tmp_path: Path) -> None:
    _make(tmp_path, "a-old", source="a", old=True)
    _make(tmp_path, "a-new", source="a", old=False)
    _make(tmp_path, "b-old", source="b", old=True)
    _make(tmp_path, "run-old", source="run", old=True)
    _make(tmp_path, "nobody", old=True)
    seen: list[str] = []

    def judge(entry: cleanup.Entry) -> str | None:
        seen.append(entry.key)
        return "old" if entry.meta["old"] else None

    assert cleanup.sweep(tmp_path, {"a": judge, "b": judge}) == ["a-old", "b-old"]
    assert sorted(seen) == ["a-new", "a-old", "b-old"]
    assert _left(tmp_path) == ["a-new", "nobody", "run-old"]


def test_entries_filter_by_source_and_sweep_takes_a_listing(tmp_path: Path) -> None:
    _make(tmp_path, "x1", source="x")
    _make(tmp_path, "y1", source="y")
    found = cleanup.entries(tmp_path, "x")
    assert [(e.key, e.source) for e in found] == [("x1", "x")]
    # Only the listing given is judged, even though y1 is of a judged source too.
    assert cleanup.sweep(tmp_path, {"x": lambda e: "gone", "y": lambda e: "gone"}, found) == ["x1"]
    assert _left(tmp_path) == ["y1"]


def test_a_directory_already_gone_is_not_reported(tmp_path: Path) -> None:
    _make(tmp_path, "z1", source="z")
    found = cleanup.entries(tmp_path)
    _left(tmp_path)
    cleanup.sweep(tmp_path, {"z": lambda e: "gone"}, found)
    assert cleanup.sweep(tmp_path, {"z": lambda e: "gone"}, found) == []
