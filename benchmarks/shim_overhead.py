"""Shim overhead: the same driver calls with and without libcgpu.so, measured in one run.

    python benchmarks/shim_overhead.py [--real] [--rounds 7] [--n 200000] [--other PATH]
                                       [--env-limit]

Without --real it runs on the simulator (the tests' driver); with --real, on the machine's
NVIDIA driver.  Rounds alternate bare and shimmed runs; the figures are medians of the rounds,
each round reporting its fastest batch of 1000 calls.  --other adds another build of
libcgpu.so (an older one, say), alternated in the same rounds.  Each shimmed run is limited as
the device plugin limits a container: a cgpu.conf with the slice and the context cost measured
on the host; --env-limit uses CGPU_MEM_LIMIT alone instead (the shim measures each context).
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cgpu.core import context_cost, gpus
from cgpu.core.config import write_config
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


def container_config(real: bool, bare: dict[str, str], state: Path) -> tuple[dict, dict]:
    """What the device plugin writes into a container's cgpu.conf: a 40 GiB slice of each GPU,
    and what a CUDA context costs on it, measured once on the host."""
    if not real:
        gpus.use_simulator()
    uuids = [g.uuid for g in gpus.list_gpus()]
    costs = context_cost.ensure(state, dict(bare, CGPU_SIM_STATE=str(state / "sim.state")))
    return {u: 40 << 30 for u in uuids}, costs


def environments(
    real: bool, ledger: Path, shims: dict[str, Path], env_limit: bool
) -> dict[str, dict[str, str]]:
    """The bare environment, and one per shim, each with its own ledger directory: limited by
    a cgpu.conf as the device plugin writes it, or (env_limit) by CGPU_MEM_LIMIT alone, where
    the shim measures each context itself."""
    bare = {k: v for k, v in os.environ.items() if not k.startswith(("CGPU_", "LD_PRELOAD"))}
    if not real:
        bare["LD_LIBRARY_PATH"] = str(sim_lib_dir())
        bare["CGPU_SIM_MEMORY"] = "80GiB"
    limits, costs = ({}, {}) if env_limit else container_config(real, bare, ledger)
    envs = {"bare": bare}
    for name, path in shims.items():
        (ledger / name).mkdir()
        envs[name] = dict(bare, LD_PRELOAD=str(path), CGPU_LEDGER_DIR=str(ledger / name))
        if env_limit:
            envs[name]["CGPU_MEM_LIMIT"] = "40GiB"
        else:
            write_config(ledger / name, limits, contexts=costs)
    return envs


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


def rotated(names: list[str], r: int) -> list[str]:
    """The builds in round `r`'s order: each takes each place in turn (a storm slows the one
    that follows it, so a fixed order would favour the first build)."""
    k = r % len(names)
    return names[k:] + names[:k]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--real", action="store_true", help="use the machine's NVIDIA driver")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--n", type=int, default=200000)
    parser.add_argument("--processes", type=int, default=64)
    parser.add_argument("--storms", type=int, default=5, help="start-up storms per build")
    parser.add_argument("--other", type=Path, help="another libcgpu.so to alternate with")
    parser.add_argument(
        "--env-limit",
        action="store_true",
        help="limit by CGPU_MEM_LIMIT alone (no cgpu.conf: the shim measures each context)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        exe = build(tmpdir, args.real)
        ledger = tmpdir / "ledger"
        ledger.mkdir()
        shims = {"shim": shim_path(), **({"other": args.other} if args.other else {})}
        envs = environments(args.real, ledger, shims, args.env_limit)
        rows: dict[str, dict[str, list[float]]] = {"pairs": {}, "meminfo": {}}
        names = list(envs)
        for r in range(args.rounds):
            for name in rotated(names, r):
                env = envs[name]
                pairs = measure(exe, env, "pairs", str(args.n), str(2 << 20))
                rows["pairs"].setdefault(name, []).append(pairs)
                meminfo = measure(exe, env, "meminfo", str(args.n))
                rows["meminfo"].setdefault(name, []).append(meminfo)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        storms: dict[str, list[list[float]]] = {name: [] for name in envs}
        for r in range(args.storms):  # alternated too: a storm measures the machine as well
            for name in rotated(names, r):
                storms[name].append(init_storm(exe, envs[name], args.processes))
        shutil.rmtree(ledger, ignore_errors=True)
    machine = platform.processor() or platform.machine()
    driver = "real" if args.real else "simulator"
    print(
        f"# {time.strftime('%Y-%m-%d')} {platform.node()} {machine}"
        f" driver={driver} rounds={args.rounds} n={args.n}"
        f" limit={'CGPU_MEM_LIMIT' if args.env_limit else 'cgpu.conf'}"
    )
    print(
        f"{'what':38}"
        + "".join(f"{n:>10}" for n in names)
        + "".join(f"{'+' + n:>10}" for n in names[1:])
    )
    for label, key in (("alloc+free pair (2 MiB) [ns]", "pairs"), ("cuMemGetInfo [ns]", "meminfo")):
        med = [statistics.median(rows[key][n]) for n in names]
        print(
            f"{label:38}"
            + "".join(f"{m:10.1f}" for m in med)
            + "".join(f"{m - med[0]:10.1f}" for m in med[1:])
        )
    for q, idx in (("p50", 0.5), ("p99", 0.99)):
        med = [statistics.median(s[int(idx * (len(s) - 1))] for s in storms[n]) for n in names]
        label = f"init, {args.processes} at once, {q} [us]"
        print(
            f"{label:38}"
            + "".join(f"{m:10.1f}" for m in med)
            + "".join(f"{m - med[0]:10.1f}" for m in med[1:])
        )


if __name__ == "__main__":
    main()
