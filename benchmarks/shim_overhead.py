"""Shim overhead: the same driver calls with and without libcgpu.so, measured in one run.

    python benchmarks/shim_overhead.py [--real] [--rounds 7] [--n 200000]

Without --real it runs on the simulator (the tests' driver); with --real, on the machine's
NVIDIA driver.  Rounds alternate bare and shimmed runs; the figures are medians.
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from cgpu.core.paths import shim_path, sim_lib_dir

HERE = Path(__file__).resolve().parent


def build(out: Path, real: bool) -> Path:
    include = next(
        p
        for p in [
            os.environ.get("CUDA_HOME", "") + "/include",
            "/usr/local/cuda/include",
            *sorted(glob.glob("/usr/local/cuda-*/include"), reverse=True),
        ]
        if Path(p, "cuda.h").is_file()
    )
    exe = out / "shim_bench"
    lib = [] if real else ["-L", str(sim_lib_dir())]
    subprocess.run(
        [
            "cc",
            "-O2",
            "-std=gnu11",
            "-I",
            include,
            str(HERE / "shim_bench.c"),
            "-o",
            str(exe),
            *lib,
            "-l:libcuda.so.1",
        ],
        check=True,
    )
    return exe


def environments(real: bool, ledger: Path) -> tuple[dict[str, str], dict[str, str]]:
    bare = {k: v for k, v in os.environ.items() if not k.startswith(("CGPU_", "LD_PRELOAD"))}
    if not real:
        bare["LD_LIBRARY_PATH"] = str(sim_lib_dir())
        bare["CGPU_SIM_MEMORY"] = "80GiB"
    shimmed = dict(
        bare, LD_PRELOAD=str(shim_path()), CGPU_MEM_LIMIT="40GiB", CGPU_LEDGER_DIR=str(ledger)
    )
    return bare, shimmed


def measure(exe: Path, env: dict[str, str], *args: str) -> float:
    out = subprocess.run([str(exe), *args], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def init_storm(exe: Path, env: dict[str, str], processes: int) -> list[float]:
    """Start `processes` at once under one ledger; each reports start-to-first-allocation in us."""
    procs = [
        subprocess.Popen([str(exe), "init"], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    return sorted(float(p.communicate()[0]) for p in procs)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--real", action="store_true", help="use the machine's NVIDIA driver")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n", type=int, default=200000)
    parser.add_argument("--processes", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        exe = build(tmpdir, args.real)
        ledger = tmpdir / "ledger"
        ledger.mkdir()
        bare, shimmed = environments(args.real, ledger)
        rows: dict[str, dict[str, list[float]]] = {
            "pairs": {"bare": [], "shim": []},
            "meminfo": {"bare": [], "shim": []},
        }
        for _ in range(args.rounds):
            for name, env in (("bare", bare), ("shim", shimmed)):
                rows["pairs"][name].append(measure(exe, env, "pairs", str(args.n), str(2 << 20)))
                rows["meminfo"][name].append(measure(exe, env, "meminfo", str(args.n)))
        storms = {
            name: init_storm(exe, env, args.processes)
            for name, env in (("bare", bare), ("shim", shimmed))
        }
        shutil.rmtree(ledger, ignore_errors=True)
    machine = platform.processor() or platform.machine()
    driver = "real" if args.real else "simulator"
    print(
        f"# {time.strftime('%Y-%m-%d')} {platform.node()} {machine}"
        f" driver={driver} rounds={args.rounds} n={args.n}"
    )
    print(f"{'what':38} {'bare':>10} {'shim':>10} {'added':>10}")
    for label, key, unit in (
        ("alloc+free pair (2 MiB)", "pairs", "ns"),
        ("cuMemGetInfo", "meminfo", "ns"),
    ):
        b, s = statistics.median(rows[key]["bare"]), statistics.median(rows[key]["shim"])
        print(f"{label + ' [' + unit + ']':38} {b:10.1f} {s:10.1f} {s - b:10.1f}")
    for q in ("p50", "p99"):
        idx = {"p50": 0.5, "p99": 0.99}[q]
        b = storms["bare"][int(idx * (len(storms["bare"]) - 1))]
        s = storms["shim"][int(idx * (len(storms["shim"]) - 1))]
        label = f"init, {args.processes} at once, {q} [us]"
        print(f"{label:38} {b:10.1f} {s:10.1f} {s - b:10.1f}")


if __name__ == "__main__":
    main()
