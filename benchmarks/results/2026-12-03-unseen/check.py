"""Independent check (issue 35, "Done when"): mixes the project's tests and benchmarks have not
run, each on its own simulated GPU under `cgpu compute-arbiter`, NVML sampled as on an H100.

    python -P benchmarks/results/2026-12-03-unseen/check.py [--seconds 12] [--only NAME]

Prints each container's share of the GPU's time in every 1 s window from the second one, and
the goal it is judged against (the issue's: a limit within 5, best effort what is left).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "shim"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from compute_kit import build_load, one_second_windows, run_isolated  # noqa: E402
from compute_share import INFER_NS, INFER_RATE, base_env, build_inference  # noqa: E402

from cgpu.core.paths import sim_lib_dir  # noqa: E402

MS = 1_000_000


def c(name, kernel_ns, conf=None, hosted=False, processes=1, **extra):
    return {
        "name": name,
        "env": {},
        "conf": list(conf) if conf else None,
        "hosted": hosted,
        "processes": processes,
        "kernel_ns": kernel_ns,
        **extra,
    }


# name -> (containers, goals): goal (kind, target) per container name; "sum:" names add up
# containers that share one ledger (one container, processes of two kernel lengths).
MIXES = {
    "fixed 40 + fixed 40 + best effort of 2, 2 ms": (
        [
            c("f40a", 2 * MS, (40, "fixed")),
            c("f40b", 2 * MS, (40, "fixed")),
            c("be", 2 * MS, hosted=True, processes=2),
        ],
        {"f40a": ("band", 40), "f40b": ("band", 40), "be": ("at least", 10)},
    ),
    "fixed 10 + 20 + 30 + best effort of 3, 5 ms": (
        [
            c("f10", 5 * MS, (10, "fixed")),
            c("f20", 5 * MS, (20, "fixed")),
            c("f30", 5 * MS, (30, "fixed")),
            c("be", 5 * MS, hosted=True, processes=3),
        ],
        {"f10": ("band", 10), "f20": ("band", 20), "f30": ("band", 30), "be": ("at least", 30)},
    ),
    "fixed 30 of 300 us and 20 ms processes + share 70, 1 ms": (
        [
            c("mixA", 300_000, (30, "fixed"), ledger_as="mix"),
            c("mixB", 20 * MS, (30, "fixed"), ledger_as="mix"),
            c("s70", MS, (70, "share")),
        ],
        {"sum:mixA+mixB": ("band", 30), "s70": ("band", 70)},
    ),
    "share 25 + share 75 + best effort arriving at 4 s, leaving at 8 s, 3 ms": (
        [
            c("s25", 3 * MS, (25, "share")),
            c("s75", 3 * MS, (75, "share")),
            c("be", 3 * MS, hosted=True, processes=2, start_after=4.0, seconds=4.0),
        ],
        {"s25": ("band", 25), "s75": ("band", 75)},
    ),
    "fixed 25 high (never idle) + share 75 low, 500 us": (
        [c("hi", 500_000, (25, "fixed", "high")), c("lo", 500_000, (75, "share", "low"))],
        {"hi": ("band", 25), "lo": ("at least", 60)},
    ),
    "fixed 25 normal (never idle) + share 75 normal, 500 us": (
        [c("hi", 500_000, (25, "fixed")), c("lo", 500_000, (75, "share"))],
        {"hi": ("band", 25), "lo": ("band", 75)},
    ),
    "fixed 25 high + share 75 low, 5 ms": (
        [c("hi", 5 * MS, (25, "fixed", "high")), c("lo", 5 * MS, (75, "share", "low"))],
        {"hi": ("band", 25), "lo": ("at least", 60)},
    ),
    "fixed 50 of 4 processes + best effort of 4, 3 ms": (
        [c("f50x4", 3 * MS, (50, "fixed"), processes=4), c("be", 3 * MS, hosted=True, processes=4)],
        {"f50x4": ("band", 50), "be": ("at least", 40)},
    ),
}


# Priority mixes: an inference stand-in (2 ms requests at 50/s, Poisson) with the neighbours
# below; its p99 against its p99 alone, measured first in the same run (goal: <= 2.5x, the
# issue's bound beside 10 ms kernels; the neighbours' kernels here are at most 5 ms).
PRIORITY_MIXES = {
    "alone, fixed 20": [],
    "alone, share 30": [],
    "high fixed 20 + normal share 40 (1 ms) + low share 40 (5 ms)": [
        c("normal", MS, (40, "share", "normal")),
        c("low", 5 * MS, (40, "share", "low")),
    ],
    "high share 30 + low share 70 (5 ms) + best effort (1 ms)": [
        c("low", 5 * MS, (70, "share", "low")),
        c("be", MS, hosted=True),
    ],
}
INFER_CONF = {
    "alone, fixed 20": (20, "fixed", "high"),
    "alone, share 30": (30, "share", "high"),
    "high fixed 20 + normal share 40 (1 ms) + low share 40 (5 ms)": (20, "fixed", "high"),
    "high share 30 + low share 70 (5 ms) + best effort (1 ms)": (30, "share", "high"),
}


def _spec(env: dict, load: Path, containers: list[dict], seconds: float, arbiter: list) -> dict:
    """One simulated machine's run under the arbiter, for `run_isolated`."""
    return {
        "sim_dir": str(sim_lib_dir()),
        "state": env["CGPU_SIM_STATE"],
        "load": str(load),
        "env": env,
        "containers": containers,
        "windows": one_second_windows(0.0, seconds),
        "arbiter": arbiter,
    }


def priority(tmp: Path, load: Path, seconds: float) -> tuple[int, int]:
    """Run the priority mixes; (goals met, goals)."""
    infer = build_inference(shutil.which("cc") or "cc", tmp)
    alone: dict[tuple, float] = {}
    met = total = 0
    for m, (mix, others) in enumerate(PRIORITY_MIXES.items()):
        env = base_env(tmp, f"p{m}.state", 1, shim=True)
        report = tmp / f"p{m}.report"
        containers = [
            {
                "name": "inference",
                "env": {},
                "conf": list(INFER_CONF[mix]),
                "argv": [
                    str(infer),
                    str(INFER_NS),
                    str(INFER_RATE),
                    str(seconds + 0.5),
                    str(report),
                ],
                "seconds": seconds,
                "ledger": str(tmp / f"p{m}" / "inference"),
            }
        ]
        for cont in others:
            cont = {**cont, "ledger": str(tmp / f"p{m}" / cont["name"]), "seconds": seconds + 0.5}
            containers.append(cont)
        spec = _spec(env, load, containers, seconds, [])
        result = run_isolated(spec)[1:]
        words = report.read_text().split()
        figures = dict(zip(words[::2], map(float, words[1::2]), strict=True))
        print(f"\n{mix}: p50 {figures['p50']:.2f} ms, p99 {figures['p99']:.2f} ms", end="")
        if not others:
            alone[INFER_CONF[mix]] = figures["p99"]
            print()
            continue
        ratio = figures["p99"] / alone[INFER_CONF[mix]]
        ok = ratio <= 2.5
        met, total = met + ok, total + 1
        print(f" = {ratio:.1f}x alone ({'ok' if ok else 'MISSED'}: <= 2.5x)")
        for name in ["inference", *(cont["name"] for cont in others)]:
            row = " ".join(f"{w.get(name, 0.0):5.1f}" for w in result)
            print(f"  {name:14s} {row}")
        print(f"  {'GPU busy':14s} " + " ".join(f"{sum(w.values()):5.1f}" for w in result))
    return met, total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--only", default="")
    parser.add_argument("--priority", action="store_true", help="the priority mixes only")
    parser.add_argument("--debug", default="", help="keep each arbiter's DEBUG log in this folder")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cgpu-unseen-"))
    met = total = 0
    try:
        load = build_load(shutil.which("cc") or "cc", sim_lib_dir(), tmp)
        if args.priority:
            met, total = priority(tmp, load, args.seconds)
        for m, (mix, (containers, goals)) in enumerate(MIXES.items()):
            if args.priority or (args.only and args.only not in mix):
                continue
            env = base_env(tmp, f"m{m}.state", 1, shim=True)
            for cont in containers:
                name = cont.pop("ledger_as", cont["name"])
                cont["ledger"] = str(tmp / f"m{m}" / name)
                cont["seconds"] = cont.get("seconds", args.seconds) + 0.5
            debug = ["--log-level", "DEBUG"] if args.debug else []
            spec = _spec(env, load, containers, args.seconds, debug)
            result = run_isolated(spec)[1:]
            if args.debug:
                Path(args.debug).mkdir(parents=True, exist_ok=True)
                shutil.copy(tmp / f"m{m}" / "arbiter.log", Path(args.debug) / f"m{m}.log")
            print(f"\n{mix}")
            busy = [sum(w.values()) for w in result]
            for name, (kind, target) in goals.items():
                parts = name[4:].split("+") if name.startswith("sum:") else [name]
                shares = [sum(w.get(p, 0.0) for p in parts) for w in result]
                if kind == "band":
                    ok = all(abs(s - target) <= 5 for s in shares)
                elif kind == "at least":
                    ok = all(s >= target for s in shares)
                else:
                    ok = all(s <= target for s in shares)
                met, total = met + ok, total + 1
                row = " ".join(f"{s:5.1f}" for s in shares)
                print(f"  {name:14s} {row}  {kind} {target}: {'ok' if ok else 'MISSED'}")
            print(f"  {'GPU busy':14s} " + " ".join(f"{b:5.1f}" for b in busy))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{met} of {total} goals met")


if __name__ == "__main__":
    main()
