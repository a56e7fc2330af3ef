"""Shim overhead: the same driver calls with and without libcgpu.so, measured in one run.

    python benchmarks/shim_overhead.py [--driver simulator|standin|real] [--rounds 7]
                                       [--n 200000] [--other PATH] [--env-limit] [--cpu N]

--driver picks the driver under the benchmark: the simulator (the tests' driver, the default),
the stand-in (benchmarks/standin/standin.c: a tiny libcuda.so.1 whose own alloc+free pair is
about as cheap as a driver's can be, built differently from the simulator), or the machine's
NVIDIA driver (--real is the same as --driver real).  --cpu pins every run to one CPU.

Rounds alternate bare and shimmed runs; the figures are medians of the rounds,
each round reporting its fastest batch of 1000 calls.  "caches cold" writes a 32 KiB buffer
before each call, as PyTorch's path evicts the shim's lines between two calls (shim_bench cold);
the buffer costs bare and shimmed runs alike, so the difference is the shim's, cold.
--other adds another build of libcgpu.so (an older one, say), alternated in the same rounds.
Each shimmed run is limited as the device plugin limits a container: a cgpu.conf with the slice
and the context cost measured on the host; --env-limit uses CGPU_MEM_LIMIT alone instead (the
shim measures each context).
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


STANDIN_UUID = "GPU-57a1d100-be0c-4a11-9e5e-000000000001"  # the stand-in's one device


def build_standin(out: Path, include: str) -> Path:
    """The stand-in driver, as `out`/standin/libcuda.so.1; returns its directory."""
    lib_dir = out / "standin"
    lib_dir.mkdir()
    subprocess.run(
        [
            "cc",
            "-O2",
            "-std=gnu11",
            "-shared",
            "-fPIC",
            "-fvisibility=hidden",
            "-ftls-model=initial-exec",
            "-I",
            include,
            str(HERE / "standin" / "standin.c"),
            "-Wl,-soname,libcuda.so.1",
            "-o",
            str(lib_dir / "libcuda.so.1"),
        ],
        check=True,
    )
    return lib_dir


def cuda_include() -> str:
    """The directory of cuda.h."""
    return next(
        p
        for p in [
            os.environ.get("CUDA_HOME", "") + "/include",
            "/usr/local/cuda/include",
            *sorted(glob.glob("/usr/local/cuda-*/include"), reverse=True),
        ]
        if Path(p, "cuda.h").is_file()
    )


def build(out: Path, driver: str) -> tuple[Path, Path | None]:
    """shim_bench linked against `driver`'s libcuda.so.1, and the directory that holds that
    library (None for the machine's own driver)."""
    include = cuda_include()
    lib_dir = None
    if driver == "simulator":
        lib_dir = sim_lib_dir()
    elif driver == "standin":
        lib_dir = build_standin(out, include)
    exe = out / "shim_bench"
    lib = ["-L", str(lib_dir)] if lib_dir else []
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
    return exe, lib_dir


def container_config(driver: str, bare: dict[str, str], state: Path) -> tuple[dict, dict]:
    """What the device plugin writes into a container's cgpu.conf: a 40 GiB slice of each GPU,
    and what a CUDA context costs on it, measured once on the host (the stand-in has no NVML:
    its context cost is set, 0)."""
    if driver == "standin":
        return {STANDIN_UUID: 40 << 30}, {STANDIN_UUID: 0}
    if driver == "simulator":
        gpus.use_simulator()
    uuids = [g.uuid for g in gpus.list_gpus()]
    costs = context_cost.ensure(state, dict(bare, CGPU_SIM_STATE=str(state / "sim.state")))
    return {u: 40 << 30 for u in uuids}, costs


def environments(
    driver: str, lib_dir: Path | None, ledger: Path, shims: dict[str, Path], env_limit: bool
) -> dict[str, dict[str, str]]:
    """The bare environment, and one per shim, each with its own ledger directory: limited by
    a cgpu.conf as the device plugin writes it, or (env_limit) by CGPU_MEM_LIMIT alone, where
    the shim measures each context itself."""
    bare = {k: v for k, v in os.environ.items() if not k.startswith(("CGPU_", "LD_PRELOAD"))}
    if lib_dir:
        bare["LD_LIBRARY_PATH"] = str(lib_dir)
        bare["CGPU_SIM_MEMORY"] = "80GiB"
    if driver == "standin":
        bare["CGPU_CONTEXT_OVERHEAD"] = "0"  # with --env-limit: it has no NVML to measure with
    limits, costs = ({}, {}) if env_limit else container_config(driver, bare, ledger)
    envs = {"bare": bare}
    for name, path in shims.items():
        (ledger / name).mkdir()
        envs[name] = dict(bare, LD_PRELOAD=str(path), CGPU_LEDGER_DIR=str(ledger / name))
        if env_limit:
            envs[name]["CGPU_MEM_LIMIT"] = "40GiB"
        else:
            write_config(ledger / name, limits, contexts=costs)
    return envs


def measure(exe: Path, env: dict[str, str], *args: str, cpu: int | None = None) -> float:
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
    out = subprocess.run(
        [*pin, str(exe), *args], env=env, capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip())


def init_storm(exe: Path, env: dict[str, str], processes: int) -> list[float]:
    """Start `processes` at once under one ledger; each reports start-to-first-allocation in us."""
    procs = [
        subprocess.Popen([str(exe), "init"], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    return sorted(float(p.communicate()[0]) for p in procs)


def spread(values: list[float]) -> str:
    """min / median / max of the rounds."""
    return f"{min(values):8.1f} / {statistics.median(values):6.1f} / {max(values):6.1f}"


def rotated(names: list[str], r: int) -> list[str]:
    """The builds in round `r`'s order: each takes each place in turn (a storm slows the one
    that follows it, so a fixed order would favour the first build)."""
    k = r % len(names)
    return names[k:] + names[:k]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--driver",
        choices=("simulator", "standin", "real"),
        default="simulator",
        help="the driver under the benchmark (default: the simulator)",
    )
    parser.add_argument("--real", action="store_true", help="the same as --driver real")
    parser.add_argument("--cpu", type=int, help="pin the timed runs to this CPU (taskset)")
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
    driver = "real" if args.real else args.driver
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        exe, lib_dir = build(tmpdir, driver)
        ledger = tmpdir / "ledger"
        ledger.mkdir()
        shims = {"shim": shim_path(), **({"other": args.other} if args.other else {})}
        envs = environments(driver, lib_dir, ledger, shims, args.env_limit)
        rows: dict[str, dict[str, list[float]]] = {"pairs": {}, "cold": {}, "meminfo": {}}
        names = list(envs)
        for r in range(args.rounds):
            for name in rotated(names, r):
                env = envs[name]
                pairs = measure(exe, env, "pairs", str(args.n), str(2 << 20), cpu=args.cpu)
                rows["pairs"].setdefault(name, []).append(pairs)
                cold = measure(exe, env, "cold", str(args.n // 5), str(2 << 20), "32", cpu=args.cpu)
                rows["cold"].setdefault(name, []).append(cold)
                meminfo = measure(exe, env, "meminfo", str(args.n), cpu=args.cpu)
                rows["meminfo"].setdefault(name, []).append(meminfo)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        storms: dict[str, list[list[float]]] = {name: [] for name in envs}
        for r in range(args.storms):  # alternated too: a storm measures the machine as well
            for name in rotated(names, r):
                storms[name].append(init_storm(exe, envs[name], args.processes))
        shutil.rmtree(ledger, ignore_errors=True)
    machine = platform.processor() or platform.machine()
    print(
        f"# {time.strftime('%Y-%m-%d')} {platform.node()} {machine}"
        f" driver={driver} rounds={args.rounds} n={args.n}"
        f" limit={'CGPU_MEM_LIMIT' if args.env_limit else 'cgpu.conf'}"
        f" cpu={'any' if args.cpu is None else args.cpu}"
    )
    print(
        f"{'what':38}"
        + "".join(f"{n:>10}" for n in names)
        + "".join(f"{'+' + n:>10}" for n in names[1:])
    )
    for label, key in (
        ("alloc+free pair (2 MiB) [ns]", "pairs"),
        ("the same, caches cold [ns]", "cold"),
        ("cuMemGetInfo [ns]", "meminfo"),
    ):
        med = [statistics.median(rows[key][n]) for n in names]
        print(
            f"{label:38}"
            + "".join(f"{m:10.1f}" for m in med)
            + "".join(f"{m - med[0]:10.1f}" for m in med[1:])
        )
    print("spread of the rounds (min / median / max); added: each round's shim - its bare")
    for label, key in (("pair", "pairs"), ("pair cold", "cold"), ("cuMemGetInfo", "meminfo")):
        bare_runs = rows[key][names[0]]
        for n in names:
            print(f"  {label + ' ' + n:36}{spread(rows[key][n])}")
        for n in names[1:]:
            added = [s - b for s, b in zip(rows[key][n], bare_runs, strict=True)]
            print(f"  {label + ' added, ' + n:36}{spread(added)}")
    if not args.storms:
        return
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
