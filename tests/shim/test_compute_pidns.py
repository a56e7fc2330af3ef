"""The compute limit in containers with their own pid namespace (contract: "Compute share").

NVML reports the kernel's pids as the host sees them; the container's ledger holds the pids of
its own namespace. Each container here is `unshare --pid --fork`: its processes are 2, 3, ... in
their namespace, whatever their host pids, so two containers hold the same pids in their ledgers.
Shares come from the simulator's exact per-process kernel time (compute_kit.py).
"""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path

import pytest
from compute_kit import build_load, descendants, one_second_windows, pidns_works, run_isolated

MS = 1_000_000
# The ledger's slot array (native/shim/ledger.h, layout 3): after a 88-byte header and 16
# devices of 128 bytes; each slot is {u32 in_use, i32 pid, u64 start_time, u64 used[16]}.
SLOTS_AT, SLOT_SIZE, SLOTS = 88 + 16 * 128, 144, 256

pytestmark = pytest.mark.skipif(not pidns_works(), reason="this machine allows no pid namespace")


@pytest.fixture(scope="module")
def load(tmp_path_factory: pytest.TempPathFactory, cc: str, sim_dir: Path) -> Path:
    return build_load(cc, sim_dir, tmp_path_factory.mktemp("compute_load"))


def _loads_of(ledger: Path) -> list[int]:
    """Host pids of the compute_load processes whose ledger directory is `ledger`."""
    mark = f"CGPU_LEDGER_DIR={ledger}".encode()
    found = []
    for pid in descendants({1}):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != "compute_load":
                continue
            if mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(pid)
        except OSError:
            continue
    return found


def _in_namespace(pid: int) -> tuple[int, int]:
    """(its pid in its own namespace, its start time), from the host's /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    nspid = int(next(line for line in status.splitlines() if line.startswith("NSpid:")).split()[-1])
    start = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    return nspid, start


def _claim(ledger: Path, victims: list[int]) -> int:
    """Write the victims' (namespace pid, start time) into free slots of `ledger`, as a hostile
    container could; returns how many were written."""
    path = ledger / "cgpu.ledger"
    data = bytearray(path.read_bytes())
    free = [
        s for s in range(SLOTS) if struct.unpack_from("<I", data, SLOTS_AT + s * SLOT_SIZE)[0] == 0
    ]
    with path.open("r+b") as f:
        for slot, pid in zip(free, victims, strict=False):
            nspid, start = _in_namespace(pid)
            f.seek(SLOTS_AT + slot * SLOT_SIZE)
            f.write(struct.pack("<IiQ", 1, nspid, start))
    return min(len(free), len(victims))


def test_a_container_with_its_own_pid_namespace_holds_its_limit(shim_env, sim_dir, load, tmp_path):
    # Two containers, each in its own pid namespace, saturate one GPU: `fixed` 30% and an
    # unlimited neighbour. The limited one must find its processes among NVML's host pids (or
    # it escapes its limit), and must not count the neighbour's (or it starves). After 1.5 s the
    # limited container's ledger is made to claim the neighbour's processes by their namespace
    # pids and start times: that must change nothing.
    # This is the shim's NVML controller (no arbiter runs). NVML gives each process its own
    # figure here (exact attribution): this test is about where processes are placed. Where NVML
    # names one process per period, as a real H100 does, this controller lets a limited container
    # beside a saturating neighbour swing between about 20 and 40% of its 30 per second; the
    # arbiter is what holds it there (test_compute_arbiter.py, in pid namespaces too).
    env = shim_env(devices=1, util_attribution="exact")
    env.pop("CGPU_LEDGER_DIR")
    env["CGPU_SIM_STATE"] = str(tmp_path / "sim.state")
    ledgers = {name: tmp_path / "ledgers" / name for name in ("limited", "neighbour")}
    containers = [
        {
            "name": "limited",
            "env": {"CGPU_COMPUTE_LIMIT": "30"},
            "processes": 2,
            "kernel_ns": 1 * MS,
            "seconds": 7.0,
            "pidns": True,
            "ledger": str(ledgers["limited"]),
        },
        {
            "name": "neighbour",
            "env": {},
            "processes": 2,
            "kernel_ns": 1 * MS,
            "seconds": 7.0,
            "pidns": True,
            "ledger": str(ledgers["neighbour"]),
        },
    ]
    spec = {
        "sim_dir": str(sim_dir),
        "state": env["CGPU_SIM_STATE"],
        "load": str(load),
        "env": env,
        "containers": containers,
        "windows": one_second_windows(1.5, 6.5),
    }
    claimed: list[int] = []

    def hostile() -> None:
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and not claimed:
            time.sleep(0.1)
            victims = _loads_of(ledgers["neighbour"])
            if len(victims) == 2 and (ledgers["limited"] / "cgpu.ledger").exists():
                time.sleep(1.0)
                claimed.append(_claim(ledgers["limited"], victims))

    forger = threading.Thread(target=hostile)
    forger.start()
    windows = run_isolated(spec)
    forger.join()
    assert claimed == [2]
    for w in windows:
        assert abs(w["limited"] - 30) <= 6, windows
        assert w["neighbour"] >= 55, windows  # the GPU's other time is the neighbour's


def test_nvml_reports_host_pids_for_a_namespaced_process(shim_env, sim_dir, load, tmp_path):
    # What the controller relies on, and what a real driver does: the simulator's NVML shows
    # a process in a pid namespace by its host pid, not its pid in the namespace.
    env = shim_env(devices=1)
    env.pop("CGPU_LEDGER_DIR")
    env["CGPU_SIM_STATE"] = str(tmp_path / "sim.state")
    ledger = tmp_path / "ledger"
    spec = {
        "sim_dir": str(sim_dir),
        "state": env["CGPU_SIM_STATE"],
        "load": str(load),
        "env": env,
        "containers": [
            {
                "name": "ns",
                "env": {},
                "processes": 2,
                "kernel_ns": 1 * MS,
                "seconds": 2.5,
                "pidns": True,
                "ledger": str(ledger),
            }
        ],
        "windows": [(1.0, 2.0)],
    }
    (share,) = run_isolated(spec)
    # The share is summed over the host pids of the namespace's processes: had the simulator
    # recorded namespace pids (2, 3), none of its time would be found (the GPU is theirs alone;
    # a loaded machine may keep them from filling it).
    assert share["ns"] >= 50, share
