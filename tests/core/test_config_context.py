"""Context lines in cgpu.conf: `context <uuid> <bytes>`, after its device's (and compute) line."""

from __future__ import annotations

from pathlib import Path

import pytest

from cgpu.core.config import (
    ConfigError,
    load_compute,
    load_config,
    load_contexts,
    render_config,
    write_config,
)

UUID = "GPU-5eed0000-0000-4000-8000-000000000000"
OTHER = "GPU-5eed0000-0000-4000-8000-000000000001"
ELSEWHERE = "GPU-5eed0000-0000-4000-8000-000000000002"
GIB = 1 << 30


def test_context_lines_round_trip_through_the_shims_parser(tmp_path: Path) -> None:
    contexts = {UUID: 96 << 20, OTHER: 0}
    path = write_config(tmp_path, {UUID: 4 * GIB, OTHER: GIB}, {UUID: 30}, contexts)
    assert path.read_text().splitlines() == [
        "# cgpu container config",
        "version 1",
        f"device {UUID} {4 * GIB}",
        f"compute {UUID} 30",
        f"context {UUID} {96 << 20}",
        f"device {OTHER} {GIB}",
        f"context {OTHER} 0",
    ]
    assert load_contexts(path) == contexts
    assert load_config(path) == {UUID: 4 * GIB, OTHER: GIB}
    assert load_compute(path) == {UUID: (30, "fixed")}


def test_the_largest_cost_is_one_gib(tmp_path: Path) -> None:
    path = write_config(tmp_path, {UUID: 4 * GIB}, contexts={UUID: GIB})
    assert load_contexts(path) == {UUID: GIB}


def test_a_device_without_a_context_line_has_no_cost(tmp_path: Path) -> None:
    path = write_config(tmp_path, {UUID: GIB, OTHER: GIB}, contexts={OTHER: 300 << 20})
    assert load_contexts(path) == {OTHER: 300 << 20}
    assert "context" not in render_config({UUID: GIB})
    assert render_config({UUID: GIB}, contexts={}) == render_config({UUID: GIB})


def test_costs_of_devices_without_a_slice_are_left_out(tmp_path: Path) -> None:
    path = write_config(tmp_path, {UUID: GIB}, contexts={UUID: 8 << 20, ELSEWHERE: 8 << 20})
    assert ELSEWHERE not in path.read_text()
    assert load_contexts(path) == {UUID: 8 << 20}


@pytest.mark.parametrize("size", [-1, GIB + 1, True, False, 1.5, "96MiB", None])
def test_bad_costs_are_refused(tmp_path: Path, size: object) -> None:
    with pytest.raises(ConfigError, match="context cost"):
        write_config(tmp_path, {UUID: GIB}, contexts={UUID: size})  # type: ignore[dict-item]
    assert not (tmp_path / "cgpu.conf").exists()


def test_a_bad_cost_of_a_device_without_a_slice_is_ignored() -> None:
    assert "context" not in render_config({UUID: GIB}, contexts={ELSEWHERE: -1})
