"""Second independent check of issue 23's compute share, with mixes the project has not run.

    .venv/bin/python -P benchmarks/results/2026-11-26-check23b/check23b.py \
        [--machines A,B,C] [--seconds 12] [--tag NAME]

One simulated machine at a time (4 GPUs, one state file, NVML attribution `sampled`, one
`cgpu compute-arbiter` over the containers' directories), one mix per GPU. A container is a
ledger directory holding the host's cgpu.conf, written with cgpu.core.config.write_config: an
8 GiB slice and, for a limited container, its compute line (an unlimited one gets the memory
line only, as a pod without a compute limit does); its processes run cb_load.c under the shim.
Every 50 ms slice of each process's exact kernel time is read from the simulator
(cgpuSimProcessBusyNs) 100 ms after it ends, while the processes run; 1 s windows are sums of 20
slices. Window 0 holds the start and is not judged. Verdicts: met, MISSED, ceiling (the limits
beside busy unlimited containers exceed the accepted ceiling floor(100/(u+1))), info (shown,
not promised).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cgpu.core.config import write_config
from cgpu.core.paths import shim_path, sim_lib_dir

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "tests" / "shim"))
from compute_kit import Arbiter, cuda_include  # noqa: E402  (start the arbiter as the tests do)

MS = 1_000_000
US = 1_000
SLICE = 0.05  # seconds per slice
PER_WINDOW = 20  # slices per 1 s window
LAG = 0.1  # a slice is read this long after it ends
TOL = 5.0


# ---------------------------------------------------------------------------------------------
# Mixes. A container: name, limit (0: unlimited), policy, kernel ns, processes, threads, env
# (cb_load's CB_* variables), signals [(seconds, name)], seconds (its processes' run time).
# A check: (label, kind, names, target, windows) with kind band / atleast / atmost over 1 s
# windows (names summed), or gap (50 ms slices: the longest run of slices after `target`
# seconds in which `names` got under half of the slice, must be <= 100 ms).


def ct(name, limit, policy, kernel_ns, **extra) -> dict:
    return {"name": name, "limit": limit, "policy": policy, "kernel_ns": kernel_ns, **extra}


def band(label, names, target, windows, verdict="judge"):
    return {"label": label, "kind": "band", "names": names, "target": target,
            "windows": windows, "verdict": verdict}


def atleast(label, names, target, windows, verdict="judge"):
    return {"label": label, "kind": "atleast", "names": names, "target": target,
            "windows": windows, "verdict": verdict}


ALL = list(range(1, 12))


def machines() -> dict[str, list[dict]]:
    alt = {"CB_BUSY_S": "1.5", "CB_IDLE_S": "1.5"}
    wake = [3, 6, 9]  # the alternating neighbour wakes at the start of these windows
    rnd = {"CB_KMIN_NS": str(10 * US), "CB_KMAX_NS": str(40 * MS)}
    return {
        "A": [
            {"title": "fixed 25 + share 20 beside an unlimited one alternating 1.5 s busy / "
                      "1.5 s idle, 2 ms",
             "containers": [ct("F25", 25, "fixed", 2 * MS), ct("S20", 20, "share", 2 * MS),
                            ct("Ualt", 0, "", 2 * MS, env=alt)],
             "checks": [
                 band("fixed 25: 25 +- 5, every window", ["F25"], 25, ALL),
                 band("fixed 25: 25 +- 5, but the neighbour's waking windows", ["F25"], 25,
                      [w for w in ALL if w not in wake]),
                 atleast("share 20: >= 15", ["S20"], 15, ALL),
                 atleast("neighbour idle all window (2,5,8,11): busy >= 90", ["F25", "S20", "Ualt"],
                         90, [2, 5, 8, 11], "info"),
                 atleast("GPU busy >= 90, every window", ["F25", "S20", "Ualt"], 90, ALL, "info"),
             ]},
            {"title": "fixed 20 + share 30 beside an unlimited one busy until 5 s, then idle "
                      "(context kept), 500 us",
             "containers": [ct("F20", 20, "fixed", 500 * US), ct("S30", 30, "share", 500 * US),
                            ct("Uquit", 0, "", 500 * US, env={"CB_QUIT_AT": "5.0"})],
             "checks": [
                 band("fixed 20: 20 +- 5, every window", ["F20"], 20, ALL),
                 atleast("share 30 while the neighbour runs (1-4): >= 25", ["S30"], 25,
                         [1, 2, 3, 4]),
                 atleast("neighbour (1-4) >= 100-50-10 = 40", ["Uquit"], 40, [1, 2, 3, 4]),
                 atleast("2 s after it idles (7-11): share 30 >= 65", ["S30"], 65,
                         [7, 8, 9, 10, 11]),
                 atleast("2 s after it idles (7-11): busy >= 90", ["F20", "S30"], 90,
                         [7, 8, 9, 10, 11]),
             ]},
            {"title": "fixed 15 + share 15 beside two unlimited ones (ceiling 33), 5 ms",
             "containers": [ct("F15", 15, "fixed", 5 * MS), ct("S15", 15, "share", 5 * MS),
                            ct("U1", 0, "", 5 * MS), ct("U2", 0, "", 5 * MS)],
             "checks": [
                 band("fixed 15: 15 +- 5", ["F15"], 15, ALL),
                 atleast("share 15: >= 10", ["S15"], 10, ALL),
                 atleast("unlimited U1+U2 >= 100-30-10 = 60", ["U1", "U2"], 60, ALL),
                 atleast("GPU busy >= 90", ["F15", "S15", "U1", "U2"], 90, ALL),
             ]},
            {"title": "fixed 10 + fixed 15 + share 20 beside one unlimited (45 <= 49), 10 ms",
             "containers": [ct("F10", 10, "fixed", 10 * MS), ct("F15", 15, "fixed", 10 * MS),
                            ct("S20", 20, "share", 10 * MS), ct("U", 0, "", 10 * MS)],
             "checks": [
                 band("fixed 10: 10 +- 5", ["F10"], 10, ALL),
                 band("fixed 15: 15 +- 5", ["F15"], 15, ALL),
                 atleast("share 20: >= 15", ["S20"], 15, ALL),
                 atleast("unlimited >= 100-45-10 = 45", ["U"], 45, ALL),
                 atleast("GPU busy >= 90", ["F10", "F15", "S20", "U"], 90, ALL),
             ]},
        ],
        "B": [
            {"title": "share 10 + share 90, 1 ms",
             "containers": [ct("S10", 10, "share", MS), ct("S90", 90, "share", MS)],
             "checks": [band("share 10: 10 +- 5", ["S10"], 10, ALL),
                        band("share 90: 90 +- 5", ["S90"], 90, ALL),
                        atleast("GPU busy >= 90", ["S10", "S90"], 90, ALL)]},
            {"title": "fixed 5 alone (2 processes), 100 us",
             "containers": [ct("F5", 5, "fixed", 100 * US, procs=2)],
             "checks": [band("fixed 5: 5 +- 5", ["F5"], 5, ALL)]},
            {"title": "fixed 95 alone, 30 ms",
             "containers": [ct("F95", 95, "fixed", 30 * MS)],
             "checks": [band("fixed 95: 95 +- 5", ["F95"], 95, ALL)]},
            {"title": "share 35 + share 65, 2 processes each, random kernels 10 us-40 ms",
             "containers": [ct("S35r", 35, "share", MS, procs=2, env=rnd),
                            ct("S65r", 65, "share", MS, procs=2, env=rnd)],
             "checks": [band("share 35: 35 +- 5", ["S35r"], 35, ALL),
                        band("share 65: 65 +- 5", ["S65r"], 65, ALL),
                        atleast("GPU busy >= 90", ["S35r", "S65r"], 90, ALL)]},
        ],
        "C": [
            {"title": "fixed 20 (8 processes, 200 us) beside an unlimited one (4 processes, 2 ms)",
             "containers": [ct("F20x8", 20, "fixed", 200 * US, procs=8),
                            ct("Ux4", 0, "", 2 * MS, procs=4)],
             "checks": [band("fixed 20 x8: 20 +- 5", ["F20x8"], 20, ALL),
                        atleast("unlimited x4 >= 70", ["Ux4"], 70, ALL),
                        atleast("GPU busy >= 90", ["F20x8", "Ux4"], 90, ALL)]},
            {"title": "fixed 25 SIGSTOPped at 3 s, SIGCONT at 5 s, beside share 25 + share 50, "
                      "2 ms",
             "containers": [ct("F25stop", 25, "fixed", 2 * MS,
                               signals=[(3.0, "SIGSTOP"), (5.0, "SIGCONT")]),
                            ct("S25", 25, "share", 2 * MS), ct("S50", 50, "share", 2 * MS)],
             "checks": [
                 band("before (1-2): fixed 25 +- 5", ["F25stop"], 25, [1, 2]),
                 band("before (1-2): share 25 +- 5", ["S25"], 25, [1, 2]),
                 band("before (1-2): share 50 +- 5", ["S50"], 50, [1, 2]),
                 {"label": "stopped: share pair busy >= 90 from 100 ms after SIGSTOP",
                  "kind": "gap", "names": ["S25", "S50"], "target": 3.0, "until": 5.0},
                 {"label": "stopped (3.1-5.0): share 25 gets 25/75 = 33.3 +- 5", "kind": "span",
                  "names": ["S25"], "target": 100 / 3, "span": [3.1, 5.0]},
                 {"label": "stopped (3.1-5.0): share 50 gets 50/75 = 66.7 +- 5", "kind": "span",
                  "names": ["S50"], "target": 200 / 3, "span": [3.1, 5.0]},
                 band("after (6-11): fixed 25 +- 5", ["F25stop"], 25, list(range(6, 12))),
                 band("after (6-11): share 25 +- 5", ["S25"], 25, list(range(6, 12))),
                 band("after (6-11): share 50 +- 5", ["S50"], 50, list(range(6, 12))),
             ]},
            {"title": "share 60 (40 ms kernels) SIGKILLed at 4 s beside share 40 (1 ms)",
             "containers": [ct("S60kill", 60, "share", 40 * MS, signals=[(4.0, "SIGKILL")]),
                            ct("S40", 40, "share", MS)],
             "checks": [
                 band("before (1-3): share 60 +- 5", ["S60kill"], 60, [1, 2, 3]),
                 band("before (1-3): share 40 +- 5", ["S40"], 40, [1, 2, 3]),
                 {"label": "after SIGKILL: share 40 kept off <= 100 ms", "kind": "gap",
                  "names": ["S40"], "target": 4.0, "until": 11.0},
                 atleast("alone, within 2 s (6-11): share 40 >= 90", ["S40"], 90,
                         list(range(6, 12))),
             ]},
            {"title": "share 60 (40 ms kernels) exits at 4 s (its own end) beside share 40 (1 ms)",
             "containers": [ct("S60exit", 60, "share", 40 * MS, seconds=4.0),
                            ct("S40", 40, "share", MS)],
             "checks": [
                 # window 3 would lose the exiting process's last 100 ms (read after it exits)
                 band("before (1-2): share 60 +- 5", ["S60exit"], 60, [1, 2]),
                 band("before (1-2): share 40 +- 5", ["S40"], 40, [1, 2]),
                 {"label": "after the exit: share 40 kept off <= 100 ms", "kind": "gap",
                  "names": ["S40"], "target": 4.0, "until": 11.0},
                 atleast("alone, within 2 s (6-11): share 40 >= 90", ["S40"], 90,
                         list(range(6, 12))),
             ]},
        ],
        # Follow-ups: minimal reproductions of what machines A-C missed.
        "D": [
            {"title": "fixed 20 (1 process, 200 us) beside an unlimited one (4 processes, 2 ms)",
             "containers": [ct("F20", 20, "fixed", 200 * US),
                            ct("Ux4", 0, "", 2 * MS, procs=4)],
             "checks": [band("fixed 20: 20 +- 5", ["F20"], 20, ALL),
                        atleast("unlimited x4 >= 70", ["Ux4"], 70, ALL)]},
            {"title": "fixed 20 (8 processes, 200 us) beside an unlimited one (1 process, 2 ms)",
             "containers": [ct("F20x8", 20, "fixed", 200 * US, procs=8),
                            ct("U", 0, "", 2 * MS)],
             "checks": [band("fixed 20 x8: 20 +- 5", ["F20x8"], 20, ALL),
                        atleast("unlimited >= 70", ["U"], 70, ALL)]},
            {"title": "fixed 20 (8 processes, 200 us) alone",
             "containers": [ct("F20x8", 20, "fixed", 200 * US, procs=8)],
             "checks": [band("fixed 20 x8: 20 +- 5", ["F20x8"], 20, ALL)]},
            {"title": "fixed 20 (8 processes, 200 us) beside an unlimited one (4 processes, "
                      "2 ms), again",
             "containers": [ct("F20x8", 20, "fixed", 200 * US, procs=8),
                            ct("Ux4", 0, "", 2 * MS, procs=4)],
             "checks": [band("fixed 20 x8: 20 +- 5", ["F20x8"], 20, ALL),
                        atleast("unlimited x4 >= 70", ["Ux4"], 70, ALL)]},
        ],
        "E": [
            {"title": "share 35 + share 65, 1 process each, random kernels 10 us-40 ms",
             "containers": [ct("S35r", 35, "share", MS, env=rnd),
                            ct("S65r", 65, "share", MS, env=rnd)],
             "checks": [band("share 35: 35 +- 5", ["S35r"], 35, ALL),
                        band("share 65: 65 +- 5", ["S65r"], 65, ALL)]},
            {"title": "share 35 + share 65, 2 processes each, 40 ms kernels",
             "containers": [ct("S35", 35, "share", 40 * MS, procs=2),
                            ct("S65", 65, "share", 40 * MS, procs=2)],
             "checks": [band("share 35: 35 +- 5", ["S35"], 35, ALL),
                        band("share 65: 65 +- 5", ["S65"], 65, ALL)]},
            {"title": "share 35 + share 65, 2 processes each, random kernels 10 us-40 ms, again",
             "containers": [ct("S35r", 35, "share", MS, procs=2, env=rnd),
                            ct("S65r", 65, "share", MS, procs=2, env=rnd)],
             "checks": [band("share 35: 35 +- 5", ["S35r"], 35, ALL),
                        band("share 65: 65 +- 5", ["S65r"], 65, ALL)]},
            {"title": "share 35 + share 65, 2 processes each, 5 ms kernels",
             "containers": [ct("S35", 35, "share", 5 * MS, procs=2),
                            ct("S65", 65, "share", 5 * MS, procs=2)],
             "checks": [band("share 35: 35 +- 5", ["S35"], 35, ALL),
                        band("share 65: 65 +- 5", ["S65"], 65, ALL)]},
        ],
        "F": [
            {"title": "fixed 25 beside an unlimited one busy until 4 s, then idle (context "
                      "kept), 2 ms",
             "containers": [ct("F25", 25, "fixed", 2 * MS),
                            ct("Uquit", 0, "", 2 * MS, env={"CB_QUIT_AT": "4.0"})],
             "checks": [band("fixed 25: 25 +- 5, every window", ["F25"], 25, ALL),
                        band("fixed 25: 25 +- 5, but window 4", ["F25"], 25,
                             [w for w in ALL if w != 4])]},
            {"title": "fixed 25 + share 20 beside an unlimited one alternating 3 s busy / "
                      "3 s idle, 2 ms",
             "containers": [ct("F25", 25, "fixed", 2 * MS), ct("S20", 20, "share", 2 * MS),
                            ct("Ualt3", 0, "", 2 * MS,
                               env={"CB_BUSY_S": "3", "CB_IDLE_S": "3"})],
             "checks": [band("fixed 25: 25 +- 5, every window", ["F25"], 25, ALL),
                        band("fixed 25: 25 +- 5, but waking (6) and idling (3, 9) windows",
                             ["F25"], 25, [1, 2, 4, 5, 7, 8, 10, 11]),
                        atleast("share 20: >= 15", ["S20"], 15, ALL)]},
            {"title": "fixed 25 + share 20 beside an unlimited one alternating 1.5 s busy / "
                      "1.5 s idle, 2 ms, again",
             "containers": [ct("F25", 25, "fixed", 2 * MS), ct("S20", 20, "share", 2 * MS),
                            ct("Ualt", 0, "", 2 * MS, env=alt)],
             "checks": [band("fixed 25: 25 +- 5, every window", ["F25"], 25, ALL),
                        band("fixed 25: 25 +- 5, but the neighbour's waking windows", ["F25"],
                             25, [w for w in ALL if w not in wake]),
                        atleast("share 20: >= 15", ["S20"], 15, ALL)]},
            {"title": "fixed 20 + share 25 beside an unlimited one busy until 5 s, then idle "
                      "(context kept), 500 us",
             "containers": [ct("F20", 20, "fixed", 500 * US), ct("S25", 25, "share", 500 * US),
                            ct("Uquit", 0, "", 500 * US, env={"CB_QUIT_AT": "5.0"})],
             "checks": [band("fixed 20: 20 +- 5, every window", ["F20"], 20, ALL),
                        band("fixed 20: 20 +- 5, but window 5", ["F20"], 20,
                             [w for w in ALL if w != 5]),
                        atleast("share 25 while the neighbour runs (1-4): >= 20", ["S25"], 20,
                                [1, 2, 3, 4]),
                        atleast("2 s after it idles (7-11): busy >= 90", ["F20", "S25"], 90,
                                [7, 8, 9, 10, 11])]},
        ],
        "G": [
            {"title": f"fixed 20 alone, {n} process{'es' if n > 1 else ''}, {u}",
             "containers": [ct(f"F20x{n}", 20, "fixed", k, procs=n)],
             "checks": [band("fixed 20: 20 +- 5", [f"F20x{n}"], 20, ALL)]}
            for n, k, u in ((1, 200 * US, "200 us"), (2, 200 * US, "200 us"),
                            (8, MS, "1 ms"), (8, 10 * US, "10 us"))
        ],
        # One mix on the machine (less CPU load than four at once).
        "H": [{"title": "fixed 20 alone, 8 processes, 200 us, the only mix on the machine",
               "containers": [ct("F20x8", 20, "fixed", 200 * US, procs=8)],
               "checks": [band("fixed 20: 20 +- 5", ["F20x8"], 20, ALL)]}],
        "I": [{"title": "fixed 20 alone, 4 processes, 200 us, the only mix on the machine",
               "containers": [ct("F20x4", 20, "fixed", 200 * US, procs=4)],
               "checks": [band("fixed 20: 20 +- 5", ["F20x4"], 20, ALL)]}],
        "J": [{"title": "fixed 20 (8 processes, 200 us) beside share 30 (1 process, 1 ms), the "
                        "only mix on the machine",
               "containers": [ct("F20x8", 20, "fixed", 200 * US, procs=8),
                              ct("S30", 30, "share", MS)],
               "checks": [band("fixed 20: 20 +- 5", ["F20x8"], 20, ALL),
                          atleast("share 30 takes the rest: >= 70", ["S30"], 70, ALL)]}],
        # (main, after the check) what the 8-process miss rests on: the holder's process count,
        # or its kernels' length beside the neighbours' 2 ms ones
        "K": [
            {"title": "fixed 20 (1 process, 200 us) beside an unlimited one (4 processes, 2 ms)",
             "containers": [ct("F20x1", 20, "fixed", 200 * US, procs=1),
                            ct("Ux4", 0, "", 2 * MS, procs=4)],
             "checks": [band("fixed 20 x1: 20 +- 5", ["F20x1"], 20, ALL)]},
            {"title": "fixed 20 (8 processes, 2 ms) beside an unlimited one (4 processes, 2 ms)",
             "containers": [ct("F20x8l", 20, "fixed", 2 * MS, procs=8),
                            ct("Ux4", 0, "", 2 * MS, procs=4)],
             "checks": [band("fixed 20 x8 2 ms: 20 +- 5", ["F20x8l"], 20, ALL)]},
        ],
    }


# ---------------------------------------------------------------------------------------------
# One machine, in a child Python (the simulator's NVML binds to one state file per process).


class Busy:
    """cgpuSimProcessBusyNs: a process's exact kernel ns on a device in [since_us, until_us)."""

    def __init__(self, state: Path) -> None:
        os.environ["CGPU_SIM_STATE"] = str(state)
        self.lib = ctypes.CDLL(str(sim_lib_dir() / "libnvidia-ml.so.1"))
        if self.lib.nvmlInit_v2() != 0:
            raise RuntimeError("nvmlInit_v2 failed")
        self.fn = self.lib.cgpuSimProcessBusyNs
        self.fn.restype = ctypes.c_ulonglong
        self.fn.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_ulonglong, ctypes.c_ulonglong]

    def uuid(self, index: int) -> str:
        h, buf = ctypes.c_void_p(), ctypes.create_string_buffer(96)
        if self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(h)) != 0:
            raise RuntimeError("no device")
        self.lib.nvmlDeviceGetUUID(h, buf, 96)
        return buf.value.decode()

    def ns(self, dev: int, pid: int, since_us: int, until_us: int) -> int:
        return int(self.fn(dev, pid, since_us, until_us))


def read_status(path: Path, at: float) -> dict:
    """The arbiter's status, reduced: per GPU index, u and each container's share and forced
    revokes (None while it has written none)."""
    try:
        gpus = json.loads(path.read_text())["gpus"]
    except (OSError, ValueError, KeyError):
        return {"at": round(at, 2), "gpus": None}
    out = {}
    for uuid, g in gpus.items():
        out[uuid[-1]] = {"u": g["unmanaged_load"], "holder": (g["holder"] or "").rsplit("/", 1)[-1],
                         "containers": {n.rsplit("/", 1)[-1]: [c["share_percent"],
                                                               c["forced_revokes"]]
                                        for n, c in g["containers"].items()}}
    return {"at": round(at, 2), "gpus": out}


def run_machine(spec: dict) -> dict:
    """Start the arbiter and every container; return every 50 ms slice's share per container."""
    busy = Busy(Path(spec["state"]))
    root = Path(spec["root"])
    seconds = spec["seconds"]
    members = []  # (gpu, container dict, ledger)
    for gpu, mix in enumerate(spec["mixes"]):
        uuid = busy.uuid(gpu)
        for c in mix["containers"]:
            ledger = root / f"gpu{gpu}_{c['name']}"
            ledger.mkdir(parents=True)
            compute = {uuid: (c["limit"], c["policy"])} if c["limit"] else {}
            write_config(ledger, {uuid: 8 << 30}, compute)
            members.append((gpu, c, ledger))
    status_file = root.parent / f"{root.name}.status.json"  # outside the containers' root
    arbiter = Arbiter(root, spec["env"], ["--status", str(status_file)])
    arbiter.wait_for([ledger for _, c, ledger in members if c["limit"]])
    # The slices' origin: a 10 ms boundary of CLOCK_REALTIME (the simulator's buckets), 0.4 s
    # ahead so every process is up; its CLOCK_MONOTONIC twin is the processes' CB_T0.
    base_us = (time.time_ns() // 10_000_000 + 40) * 10_000
    t0 = base_us / 1e6 - (time.time() - time.monotonic())
    procs: dict[str, list[subprocess.Popen]] = {}
    for gpu, c, ledger in members:
        env = {**spec["env"], **c.get("env", {}), "CGPU_LEDGER_DIR": str(ledger),
               "CUDA_VISIBLE_DEVICES": str(gpu), "CB_T0": f"{t0:.6f}"}
        run_for = c.get("seconds", seconds + LAG + 0.5)
        argv = [spec["load"], str(c["kernel_ns"]), str(run_for), str(c.get("threads", 1))]
        procs[f"{gpu}:{c['name']}"] = [
            subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(c.get("procs", 1))]
    events = sorted((at, f"{gpu}:{c['name']}", name) for gpu, c, _ in members
                    for at, name in c.get("signals", []))
    fired: list[tuple[float, str, str]] = []
    nslices = int(seconds / SLICE)
    slices: list[dict[str, float]] = []
    status: list[dict] = []  # the arbiter's status file, every 0.5 s: u and charges per GPU
    load_before = os.getloadavg()
    try:
        while len(slices) < nslices:
            now = time.monotonic() - t0
            while events and events[0][0] <= now:
                _at, key, name = events.pop(0)
                for p in procs[key]:
                    os.kill(p.pid, getattr(signal, name))
                fired.append((round(time.monotonic() - t0, 4), key, name))
            k = len(slices)
            if now >= (k + 1) * SLICE + LAG:
                a = base_us + int(k * SLICE * 1e6)
                b = base_us + int((k + 1) * SLICE * 1e6)
                row = {}
                for gpu, c, _ in members:
                    key = f"{gpu}:{c['name']}"
                    ns = sum(busy.ns(gpu, p.pid, a, b) for p in procs[key])
                    row[key] = 100.0 * ns / ((b - a) * 1000)
                slices.append(row)
                if len(slices) % 10 == 0:
                    status.append(read_status(status_file, time.monotonic() - t0))
                continue
            time.sleep(0.005)
    finally:
        for key, ps in procs.items():
            for p in ps:
                if p.poll() is None and any(e[1] == key and e[2] == "SIGSTOP" for e in fired):
                    os.kill(p.pid, signal.SIGCONT)
        failures = []
        for key, ps in procs.items():
            for p in ps:
                _out, err = p.communicate(timeout=60)
                if p.returncode not in (0, -signal.SIGKILL):
                    failures.append(f"{key} pid {p.pid} rc {p.returncode}: {err.strip()[-300:]}")
        arbiter.stop()
    log = (root / "arbiter.log").read_text(errors="replace")
    return {"slices": slices, "signals": fired, "status": status, "failures": failures,
            "load": [load_before, os.getloadavg()], "arbiter_log_tail": log[-4000:]}


# ---------------------------------------------------------------------------------------------
# Judging.


def window(slices: list[dict[str, float]], key: str, w: int) -> float:
    part = slices[w * PER_WINDOW:(w + 1) * PER_WINDOW]
    return sum(s[key] for s in part) / len(part)


def judge(check: dict, slices: list[dict[str, float]], gpu: int) -> dict:
    keys = [f"{gpu}:{n}" for n in check["names"]]
    kind, target = check["kind"], check["target"]
    verdict = check.get("verdict", "judge")
    if kind == "gap":
        # 50 ms slices from the signal to `until`: the longest run in which `names` together
        # got under half of the slice.
        first = round(target / SLICE)
        last = round(check["until"] / SLICE)
        vals = [sum(slices[k][key] for key in keys) for k in range(first, last)]
        run = longest = 0
        for v in vals:
            run = run + 1 if v < 50 else 0
            longest = max(longest, run)
        gap_ms = longest * SLICE * 1000
        return {"label": check["label"], "first_slices": [round(v, 1) for v in vals[:8]],
                "gap_ms": gap_ms, "ok": gap_ms <= 100, "verdict": verdict,
                "text": f"longest gap {gap_ms:.0f} ms (50 ms slices from {target:.2f} s: "
                        + " ".join(f"{v:.0f}" for v in vals[:8]) + " ...)"}
    if kind == "span":
        a, b = (round(x / SLICE) for x in check["span"])
        v = sum(sum(slices[k][key] for key in keys) for k in range(a, b)) / (b - a)
        ok = abs(v - target) <= TOL
        return {"label": check["label"], "value": round(v, 1), "ok": ok, "verdict": verdict,
                "text": f"{v:.1f} over {check['span'][0]}-{check['span'][1]} s "
                        f"(off {abs(v - target):.1f})"}
    vals = [sum(window(slices, key, w) for key in keys) for w in check["windows"]]
    if kind == "band":
        off = [abs(v - target) for v in vals]
        ok = max(off) <= TOL
        bad = [w for w, o in zip(check["windows"], off, strict=True) if o > TOL]
    else:
        ok = min(vals) >= target
        bad = [w for w, v in zip(check["windows"], vals, strict=True) if v < target]
    ws = check["windows"]
    return {"label": check["label"], "windows": ws, "values": [round(v, 1) for v in vals],
            "ok": ok, "bad_windows": bad, "verdict": verdict,
            "text": f"windows {ws[0]}-{ws[-1]}: {min(vals):.1f}-{max(vals):.1f}"
                    + (f", off in {bad}" if bad else "")}


# ---------------------------------------------------------------------------------------------
# The parent: build, run the machines one at a time, print and save.


def build(tmp: Path) -> Path:
    exe = tmp / "cb_load"
    subprocess.run(["cc", "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-I",
                    str(cuda_include()), str(HERE / "cb_load.c"), "-o", str(exe), "-L",
                    str(sim_lib_dir()), "-l:libcuda.so.1", "-ldl", "-lpthread", "-lm"],
                   check=True)
    return exe


def base_env(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CGPU_", "LD_PRELOAD"))}
    env.update(LD_LIBRARY_PATH=str(sim_lib_dir()), CGPU_SIM_STATE=str(state),
               CGPU_SIM_DEVICES="4", CGPU_SIM_MEMORY="16GiB",
               CGPU_SIM_UTIL_ATTRIBUTION="sampled", LD_PRELOAD=str(shim_path()),
               PYTHONDONTWRITEBYTECODE="1")
    return env


def run_child(spec: dict) -> dict:
    proc = subprocess.run([sys.executable, "-P", str(Path(__file__)), "--child", json.dumps(spec)],
                          env={k: v for k, v in spec["env"].items() if k != "LD_PRELOAD"},
                          capture_output=True, text=True, timeout=240, check=False)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report(name: str, spec: dict, result: dict, n: int) -> tuple[list[str], list[dict]]:
    lines, record = [], []
    slices = result["slices"]
    for gpu, mix in enumerate(spec["mixes"]):
        lines.append(f"\n[{name}{gpu}] {mix['title']}")
        lines.append("  window  " + "".join(f"{w:>6d}" for w in range(n)))
        keys = []
        for c in mix["containers"]:
            key = f"{gpu}:{c['name']}"
            keys.append(key)
            vals = [window(slices, key, w) for w in range(n)]
            lines.append(f"  {c['name']:8s}" + "".join(f"{v:6.1f}" for v in vals))
        total = [sum(window(slices, k, w) for k in keys) for w in range(n)]
        lines.append(f"  {'busy':8s}" + "".join(f"{v:6.1f}" for v in total))
        verdicts = [judge(ch, slices, gpu) for ch in mix["checks"]]
        for v in verdicts:
            word = ("met" if v["ok"] else "MISSED") if v["verdict"] == "judge" else (
                "info: " + ("yes" if v["ok"] else "no"))
            lines.append(f"    {v['label']:62s} {v['text']}  -> {word}")
        record.append({"machine": name, "gpu": gpu, "title": mix["title"],
                       "containers": mix["containers"], "verdicts": verdicts,
                       "windows": {c["name"]: [round(window(slices, f"{gpu}:{c['name']}", w), 2)
                                               for w in range(n)] for c in mix["containers"]},
                       "slices": {c["name"]: [round(s[f"{gpu}:{c['name']}"], 1) for s in slices]
                                  for c in mix["containers"]}})
    return lines, record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--machines", default="A,B,C")
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--tag", default="")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_machine(json.loads(args.child))))
        return
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    tmp = Path(tempfile.mkdtemp(prefix="check23b-"))
    out_lines, records = [], []
    all_m = machines()
    n = int(args.seconds)
    head = (f"check23b {stamp} UTC, {os.cpu_count()} CPUs, git "
            + subprocess.run(["git", "-C", str(REPO), "log", "--oneline", "-1"],
                             capture_output=True, text=True).stdout.strip()
            + "; machines one at a time; shares in percent of the GPU per 1 s window")
    print(head, flush=True)
    out_lines.append(head)
    try:
        load = build(tmp)
        for name in args.machines.split(","):
            root = tmp / f"machine{name}"
            root.mkdir()
            env = base_env(tmp / f"machine{name}.state")
            spec = {"root": str(root), "state": env["CGPU_SIM_STATE"], "env": env,
                    "load": str(load), "seconds": args.seconds, "mixes": all_m[name]}
            result = run_child(spec)
            lines, rec = report(name, spec, result, n)
            lines.insert(0, f"\nmachine {name}: load average before/after "
                            f"{result['load'][0][0]:.2f}/{result['load'][1][0]:.2f}; signals "
                            f"{result['signals']}; failures {result['failures'] or 'none'}")
            print("\n".join(lines), flush=True)
            out_lines += lines
            for r in rec:
                r["signals"] = result["signals"]
                r["arbiter_log_tail"] = result["arbiter_log_tail"]
                r["arbiter_status"] = [
                    {"at": st["at"], **((st["gpus"] or {}).get(f"{r['gpu']:x}") or {})}
                    for st in result["status"]]
            records += rec
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = HERE / "raw"
    out.mkdir(exist_ok=True)
    tag = f"-{args.tag}" if args.tag else ""
    (out / f"{stamp}{tag}.txt").write_text("\n".join(out_lines) + "\n")
    (out / f"{stamp}{tag}.json").write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
