"""A check of issue 35 (every container takes turns) with mixes the project had not run.

    .venv/bin/python -P benchmarks/results/2026-12-03-check35/check35.py [--seconds 12]

One simulated machine of 4 GPUs (one state file, NVML sampled as on an H100, one `cgpu
compute-arbiter`), one mix per GPU, run by tests/shim/compute_kit.py (the simulator's exact
kernel time per process, 1 s windows; window 0 holds the start and is not judged). "unl." is a
hosted container: a cgpu.conf with a memory slice and no compute line, so best effort.

- GPU 0: `fixed` 45 (5 ms kernels) beside three best-effort containers of 2 ms, 300 µs and 5 ms
  kernels: 45 +- 5; the three within 5 of each other (best effort shares by time, not launches).
- GPU 1: `fixed` 10 (four processes of 300 µs kernels) + `share` 30 (2 ms) + two best-effort (1 ms):
  10 +- 5; `share` >= 30 - 5; the GPU busy >= 95.
- GPU 2: `fixed` 25 (1 ms) and a best-effort container (3 ms) that joins at 4 s and leaves at 8 s:
  25 +- 5 in every window, before, while and after.
- GPU 3: `fixed` 35 `high` (1 ms) beside a `share` 65 `low` trainer (10 ms kernels): 35 +- 5 (a
  `high` container never goes over its own `fixed` limit); the trainer >= 55.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "tests" / "shim"))
from compute_kit import build_load, one_second_windows, run_isolated  # noqa: E402

from cgpu.core.paths import shim_path, sim_lib_dir  # noqa: E402

MS = 1_000_000
US = 1_000


def container(name, device, conf, kernel_ns, seconds, **extra):
    return {
        "name": name,
        "env": {},
        "conf": list(conf) if conf else None,
        "hosted": conf is None,
        "processes": 1,
        "kernel_ns": kernel_ns,
        "seconds": seconds,
        "device": device,
        **extra,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--trainer-ms", type=float, default=10.0, help="GPU 3's trainer kernels")
    args = parser.parse_args()
    t = args.seconds
    root = Path(tempfile.mkdtemp(prefix="check35-"))
    load = build_load("cc", sim_lib_dir(), root)
    mixes = [
        container("f45", 0, (45, "fixed"), 5 * MS, t + 0.5),
        container("u2ms", 0, None, 2 * MS, t + 0.5),
        container("u300us", 0, None, 300 * US, t + 0.5),
        container("u5ms", 0, None, 5 * MS, t + 0.5),
        container("f10x4", 1, (10, "fixed"), 300 * US, t + 0.5, processes=4),
        container("s30", 1, (30, "share"), 2 * MS, t + 0.5),
        container("ua", 1, None, MS, t + 0.5),
        container("ub", 1, None, MS, t + 0.5),
        container("f25", 2, (25, "fixed"), MS, t + 0.5),
        container("joiner", 2, None, 3 * MS, 4.0, start_after=4.0),
        container("f35high", 3, (35, "fixed", "high"), MS, t + 0.5),
        container("trainer", 3, (65, "share", "low"), int(args.trainer_ms * MS), t + 0.5),
    ]
    env = {
        "LD_PRELOAD": str(shim_path()),
        "LD_LIBRARY_PATH": str(sim_lib_dir()),
        "CGPU_SIM_STATE": str(root / "sim.state"),
        "CGPU_SIM_DEVICES": "4",
        "CGPU_SIM_MEMORY": "16GiB",
        "PATH": "/usr/bin:/bin",
    }
    for c in mixes:
        c["ledger"] = str(root / "containers" / c["name"])
    spec = {
        "sim_dir": str(sim_lib_dir()),
        "state": env["CGPU_SIM_STATE"],
        "load": str(load),
        "env": env,
        "containers": mixes,
        "windows": one_second_windows(0.0, t),
        "arbiter": [],
    }
    w = run_isolated(spec)[1:-1]

    def s(name):
        return [round(x[name], 1) for x in w]

    def line(name, text):
        print(f"{name:10s} {' '.join(f'{v:5.1f}' for v in s(name))}  {text}")

    def band(name, target):
        worst = max(abs(v - target) for v in s(name))
        line(name, f"worst |x-{target}| {worst:.1f} ({'met' if worst <= 5 else 'MISSED'})")

    print(f"check35: windows 1-{len(w)} of 1 s")
    band("f45", 45)
    trio = [s(n) for n in ("u2ms", "u300us", "u5ms")]
    gap = max(max(v) - min(v) for v in zip(*trio, strict=True))
    for n in ("u2ms", "u300us", "u5ms"):
        line(n, "")
    verdict = "met" if gap <= 5 else "MISSED"
    print(f"{'':10s} the three best-effort within {gap:.1f} of each other ({verdict})")
    band("f10x4", 10)
    lo = min(s("s30"))
    line("s30", f"lowest {lo:.1f} ({'met' if lo >= 25 else 'MISSED'}: >= 25)")
    line("ua", "")
    line("ub", "")
    busy = [sum(x) for x in zip(s("f10x4"), s("s30"), s("ua"), s("ub"), strict=True)]
    verdict = "met" if min(busy) >= 95 else "MISSED"
    print(f"{'':10s} GPU 1 busy lowest {min(busy):.1f} ({verdict}: >= 95)")
    band("f25", 25)
    line("joiner", "(joins at 4 s, leaves at 8 s)")
    band("f35high", 35)
    lo = min(s("trainer"))
    line("trainer", f"lowest {lo:.1f} ({'met' if lo >= 55 else 'MISSED'}: >= 55)")


if __name__ == "__main__":
    main()
