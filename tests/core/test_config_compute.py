"""Compute lines in cgpu.conf: `compute <uuid> <percent> [policy]` after its device's line."""

from __future__ import annotations

from pathlib import Path

import pytest

from cgpu.core.config import ConfigError, load_compute, render_config, write_config

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
