"""Compute lines in cgpu.conf: `compute <uuid> <percent> [policy [priority]]` after its device's
line."""

from __future__ import annotations

from pathlib import Path

import pytest

from cgpu.core.config import (
    ComputeLine,
    ConfigError,
    load_compute,
    load_compute_lines,
    render_config,
    write_config,
)

UUID = "GPU-5eed0000-0000-4000-8000-000000000000"
OTHER = "GPU-5eed0000-0000-4000-8000-000000000001"


def test_compute_lines_follow_the_device_lines(tmp_path: Path) -> None:
    path = write_config(tmp_path, {UUID: 4 << 30, OTHER: 1 << 30}, {UUID: 30})
    assert path.read_text().splitlines() == [
        "# cgpu container config",
        "version 1",
        f"device {UUID} {4 << 30}",
        f"compute {UUID} 30",
        f"device {OTHER} {1 << 30}",
    ]
    # the shim's own parser reads it back, with the default policy
    assert load_compute(path) == {UUID: (30, "fixed")}


def test_without_compute_the_file_is_unchanged() -> None:
    assert "compute" not in render_config({UUID: 1 << 30})
    assert render_config({UUID: 1 << 30}, {}) == render_config({UUID: 1 << 30})


@pytest.mark.parametrize("percent", [0, 101, -5, True])
def test_out_of_range_shares_are_refused(percent: int) -> None:
    with pytest.raises(ConfigError, match="1 to 100"):
        render_config({UUID: 1 << 30}, {UUID: percent})


def test_a_share_for_a_device_without_a_slice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="without a slice"):
        write_config(tmp_path, {UUID: 1 << 30}, {OTHER: 50})
    assert not (tmp_path / "cgpu.conf").exists()


def _parse(tmp_path: Path, compute_line: str) -> dict[str, ComputeLine]:
    path = tmp_path / "cgpu.conf"
    path.write_text(f"version 1\ndevice {UUID} 1GiB\n{compute_line}\n")
    return load_compute_lines(path)


def test_the_old_three_field_line_is_normal_priority(tmp_path: Path) -> None:
    assert _parse(tmp_path, f"compute {UUID} 30 share") == {
        UUID: ComputeLine(30, "share", "normal")
    }
    assert _parse(tmp_path, f"compute {UUID} 30") == {UUID: ComputeLine(30, "fixed", "normal")}


@pytest.mark.parametrize("word", ["high", "normal", "low", "HIGH", "Low"])
def test_a_fourth_field_is_the_priority(tmp_path: Path, word: str) -> None:
    line = _parse(tmp_path, f"compute {UUID} 40 fixed {word}")[UUID]
    assert line == ComputeLine(40, "fixed", word.lower())


@pytest.mark.parametrize(
    "tail",
    ["fixed urgent", "share highest", "share normalXY", "high", "fixed high low", "fixed 1"],
)
def test_a_malformed_priority_names_the_compute_line(tmp_path: Path, tail: str) -> None:
    with pytest.raises(ConfigError) as err:
        _parse(tmp_path, f"compute {UUID} 40 {tail}")
    message = str(err.value)
    assert (
        ":3: expected 'compute <uuid> <percent 1-100> [fixed|share] [high|normal|low]'" in message
    )


def test_the_priority_is_written_and_read_back(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        {UUID: 1 << 30, OTHER: 1 << 30},
        {UUID: (20, "fixed", "high"), OTHER: (50, "share")},
    )
    assert f"compute {UUID} 20 fixed high" in path.read_text().splitlines()
    assert load_compute_lines(path) == {
        UUID: ComputeLine(20, "fixed", "high"),
        OTHER: ComputeLine(50, "share", "normal"),
    }
    assert load_compute(path) == {UUID: (20, "fixed"), OTHER: (50, "share")}


@pytest.mark.parametrize(
    "share", [(20, "fixed", "urgent"), (20, "high"), (20, "fixed", "low", "x")]
)
def test_a_bad_priority_is_not_written(share: tuple) -> None:
    with pytest.raises(ConfigError, match="compute"):
        render_config({UUID: 1 << 30}, {UUID: share})
