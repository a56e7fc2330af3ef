"""The simulator's shared state file across an upgrade of the simulator."""

from __future__ import annotations

from pathlib import Path


def test_a_state_file_of_another_layout_is_replaced(run, tmp_path: Path) -> None:
    """`cgpu run --simulate` keeps its state file in the state dir between runs. An older
    simulator's file (another size, as every layout change so far made it) is replaced by a
    fresh one, with a line saying so, instead of every CUDA program failing to start."""
    state = tmp_path / "sim.state"
    state.write_bytes(b"\x01" * 4096)
    proc = run("contexts", state=str(state))
    assert proc.stdout.strip() == "ok", proc.stderr
    assert "of another simulator's layout; starting a new one" in proc.stderr
    assert state.stat().st_size > 4096
    again = run("contexts", state=str(state))  # the new file is kept, silently
    assert again.stdout.strip() == "ok"
    assert "another simulator's layout" not in again.stderr
