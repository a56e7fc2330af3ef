"""The simulator's rules for device memory the driver reserves off the allocation calls.

Runs tests/shim/family_client.py (a ctypes client) on the simulator alone, on a 1 GiB GPU. A
`usage` line there gives the device's used memory (total less cuMemGetInfo's free) and NVML's
figure for the process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from simkit import REPO, sim_environ

MiB = 1 << 20
CLIENT = REPO / "tests" / "shim" / "family_client.py"


def run(simlib: Path, tmp_path: Path, *steps: object) -> dict[str, list[list[str]]]:
    env = sim_environ(simlib, memory="1GiB", state=tmp_path / "sim.state")
    proc = subprocess.run(
        [sys.executable, "-P", str(CLIENT), *map(str, steps)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines: dict[str, list[list[str]]] = {}
    for line in proc.stdout.splitlines():
        name, *rest = line.split()
        lines.setdefault(name, []).append(rest)
    return lines


def test_a_stack_the_gpu_cannot_hold_is_refused_and_the_old_size_stays(simlib, tmp_path):
    # 8 KiB a thread is 2,112 MiB for 132 x 2048 threads: 1,848 MiB beyond the default's 264.
    r = run(
        simlib, tmp_path,
        "init", "setlimit", "stack", 8192, "getlimit", "stack",
        "setlimit", "stack", 2048, "usage", "setlimit", "stack", 600 * 1024,
    )  # fmt: skip
    assert [x[0] for x in r["setlimit"]] == ["2", "0", "1"]  # out of memory; fits; over the maximum
    assert r["getlimit"] == [["0", "1024"]]
    assert r["usage"] == [["0", str(264 * MiB), str(264 * MiB)]]


def test_graph_memory_is_mapped_at_launch_once_per_graph(simlib, tmp_path):
    r = run(
        simlib, tmp_path,
        "init", "graph-alloc", 600 * MiB, "graph-instantiate", "graph-reserved", "usage",
        "alloc", 512 * MiB, "graph-launch", "free", "graph-launch", "graph-reserved",
        "graph-instantiate",  # a second executable graph of a graph with memory nodes
        "graph-exec-destroy", "usage", "graph-trim", "usage",
    )  # fmt: skip
    assert [x[0] for x in r["graph-instantiate"]] == ["0", "1"]
    assert [x[0] for x in r["graph-launch"]] == ["2", "0"]  # 512 + 600 MiB do not fit in 1 GiB
    assert r["graph-reserved"] == [["0", "0"], ["0", str(600 * MiB)]]
    assert r["usage"] == [["0", "0", "0"], ["0", str(600 * MiB), str(600 * MiB)], ["0", "0", "0"]]


def test_capture_needs_a_stream_of_its_own(simlib, tmp_path):
    r = run(simlib, tmp_path, "init", "capture-begin", "capture-alloc", 64 * MiB, "usage")
    assert r["capture-begin"] == [["0"]] and r["capture-alloc"] == [["0"]]
    assert r["usage"] == [["0", "0", "0"]]  # an allocation node: nothing allocated yet
