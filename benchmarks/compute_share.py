"""Compute share on the simulator with NVML as coarse as a real GPU's: each case of issue 23's
table, its share of the GPU's time in every 1 s window, and the launch latency the shim adds with
and without a limit, measured in one run.

    python benchmarks/compute_share.py [--seconds 12] [--launches 20000] [--no-arbiter]
                                       [--attribution sampled|exact]
                                       [--cases all|shares|priority|turns]
                                       [--turns-kernels 10us,1ms,50ms]

Each "container" is a ledger directory with the host's cgpu.conf (its compute limit, as the
device plugin writes it); one `cgpu compute-arbiter` per simulated machine time-slices each GPU
among them (`--no-arbiter`: the shim's NVML controller alone, as before). NVML names one process
per sample period where several ran (`sampled`, as a real H100 does; the default). The shares are
the simulator's exact kernel time per process (tests/shim/compute_kit.py), per 1 s window (5 s
for kernels longer than a quantum). Latency: ns per cuLaunchKernel of a 0 ns kernel, best of 5
rounds 100 ms apart, through dlsym, cuGetProcAddress and direct linking, without the shim, with
it and no limit, with a limit.

Priority cases (issue 35): an inference stand-in (benchmarks/inference_load.c: 2 ms requests
at 50/s, Poisson arrivals, each one kernel and a sync) alone, then beside a saturating trainer
with 1 ms or 10 ms kernels, as `high` beside `low` and as `normal` beside `normal` (the
baseline): its p99 request latency against its p99 alone, and the trainer's share of the GPU
time the inference leaves, per 1 s window from the second one. Each case runs alone on its own
simulated machine, one after the other (the latency is the host's CPU's too).

Turns (issue 35 item 1, benchmarks/compute_turns.py): every container on a GPU where one has a
compute limit takes turns under the arbiter, those without one best effort. The goal table's
mixes (`fixed` 60 beside an unlimited container, `fixed` 30 beside two, `fixed` 20 + `share` 40
beside one, with each `--turns-kernels` length; a neighbour that wakes and idles every 1.5 s; two
saturating best-effort containers beside an idle limited one), then the launch latency with two
more rows: a hosted container on a GPU nobody limits (and what its lookups of the launch entry
points give: the driver's own functions) and a best-effort one holding a gated GPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cgpu.core.paths import shim_path, sim_lib_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "shim"))
from compute_kit import Arbiter, Nvml, build_load, one_second_windows, run_isolated

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, also under -P
from compute_turns import launch_verdicts, turns_machines, turns_report

MS = 1_000_000
STOP, BACK = 5.0, 8.0  # `share` alone: the 70% container stops, and a new one arrives


def base_env(
    tmp: Path, state: str, devices: int, shim: bool, attribution: str = "sampled"
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CGPU_", "LD_PRELOAD"))}
    env.update(
        LD_LIBRARY_PATH=str(sim_lib_dir()),
        CGPU_SIM_STATE=str(tmp / state),
        CGPU_SIM_DEVICES=str(devices),
        CGPU_SIM_MEMORY="16GiB",
        CGPU_SIM_UTIL_ATTRIBUTION=attribution,
    )
    if shim:
        env["LD_PRELOAD"] = str(shim_path())
    return env


# name -> (goal, target): "band" (target +- 5 from the second window), "at least", "long"
# (+- 5 over 5 s windows), or the `share`-alone hand-over; and name -> its GPU's group, whose
# shares add up to the device's busy time.
GOALS: dict[str, tuple[str, float]] = {}
GROUPS: dict[str, str] = {}


def member(
    name: str,
    device: int,
    percent: int,
    policy: str,
    kernel_ns: int,
    seconds: float,
    goal: tuple[str, float] = ("band", -1.0),
    group: str = "",
    **extra,
) -> dict:
    """One container: its compute limit in the host's cgpu.conf (percent 0: no limit)."""
    GOALS[name] = (goal[0], percent if goal[1] < 0 else goal[1])
    if group:
        GROUPS[name] = group
    env = {"CGPU_COMPUTE_LIMIT": str(percent), "CGPU_COMPUTE_POLICY": policy} if percent else {}
    return {
        "name": name,
        "env": env,
        "conf": [percent, policy] if percent else None,
        "processes": 1,
        "kernel_ns": kernel_ns,
        "seconds": seconds + 0.5,
        "device": device,
        **extra,
    }


def unit(ns: int) -> str:
    return f"{ns // MS} ms" if ns >= MS else f"{ns // 1000} us"


def pairs(kernel_ns: int, seconds: float) -> list[dict]:
    """The four cases of neighbours on four GPUs, with one kernel length."""
    u, k, t = unit(kernel_ns), kernel_ns, seconds
    pair, trio = f"share 30+70%, {u}", f"share 20+30+50%, {u}"
    return [
        member(f"fixed 30% beside unlimited, {u}", 0, 30, "fixed", k, t),
        member(f"unlimited beside fixed 30%, {u}", 0, 0, "", k, t, goal=("at least", 60)),
        member(f"share 30% + 70%: 30, {u}", 1, 30, "share", k, t, group=pair),
        member(f"share 30% + 70%: 70, {u}", 1, 70, "share", k, t, group=pair),
        member(f"share 20+30+50%: 20, {u}", 2, 20, "share", k, t, group=trio),
        member(f"share 20+30+50%: 30, {u}", 2, 30, "share", k, t, group=trio),
        member(f"share 20+30+50%: 50, {u}", 2, 50, "share", k, t, group=trio),
        member(f"fixed 30% + 30%: a, {u}", 3, 30, "fixed", k, t),
        member(f"fixed 30% + 30%: b, {u}", 3, 30, "fixed", k, t),
    ]


def beside_unlimited(kernel_ns: int, seconds: float) -> list[dict]:
    """Limited containers whose limits add up past the ceiling beside an unlimited one (about
    half the GPU with one busy unlimited process): `fixed` 20 keeps its percent and `share` 40
    gets what is left; `fixed` 60 gets the ceiling (shown, not a goal)."""
    u, k, t = unit(kernel_ns), kernel_ns, seconds
    return [
        member(f"fixed 20 + share 40 + unl.: 20, {u}", 0, 20, "fixed", k, t),
        member(f"fixed 20 + share 40 + unl.: 40, {u}", 0, 40, "share", k, t,
               goal=("at least", 20)),
        member(f"fixed 20 + share 40 + unl.: unl, {u}", 0, 0, "", k, t, goal=("at least", 40)),
        member(f"fixed 60 + unlimited: 60, {u}", 1, 60, "fixed", k, t, goal=("shown", 0)),
        member(f"fixed 60 + unlimited: unl, {u}", 1, 0, "", k, t, goal=("shown", 0)),
    ]


def machines(tmp: Path, load: Path, seconds: float, attribution: str, arbiter: bool) -> list[dict]:
    """Four simulated machines: the neighbour cases with 10 us, 1 ms and 50 ms kernels, then
    `share` alone after the others stop and back, and 200 ms kernels (longer than a quantum)."""
    n = int(seconds)
    groups = [pairs(k, seconds) for k in (10_000, MS, 50 * MS)] + [
        [
            member(
                "share 30% alone after", 0, 30, "share", MS, seconds, goal=("alone", 30),
                processes=2,
            ),
            member("share 70% until stop", 0, 70, "share", MS, STOP - 0.5, goal=("until", 70)),
            member(
                "share 70% back", 0, 70, "share", MS, seconds - BACK, goal=("back", 70),
                start_after=BACK,
            ),
            member("share 30% + 70%: 30, 200 ms", 1, 30, "share", 200 * MS, seconds,
                   goal=("long", 30)),
            member("share 30% + 70%: 70, 200 ms", 1, 70, "share", 200 * MS, seconds,
                   goal=("long", 70)),
        ]
    ] + [beside_unlimited(MS, seconds)]
    out = []
    for m, containers in enumerate(groups):
        for c in containers:
            c["ledger"] = str(tmp / f"machine{m}" / c["name"].replace(" ", "_").replace("%", ""))
        env = base_env(tmp, f"machine{m}.state", 4, shim=True, attribution=attribution)
        windows = one_second_windows(0.0, seconds)
        if any(GOALS[c["name"]][0] == "long" for c in containers):
            windows += [(1.0 + 5 * i, 6.0 + 5 * i) for i in range((n - 1) // 5)]
        spec = {
            "sim_dir": str(sim_lib_dir()),
            "state": env["CGPU_SIM_STATE"],
            "load": str(load),
            "env": env,
            "containers": containers,
            "windows": windows,
        }
        if arbiter:
            spec["arbiter"] = []
        out.append(spec)
    return out


INFER_NS, INFER_RATE = 2 * MS, 50.0  # 2 ms requests at 50/s
INFER_LIMIT = (30, "share")  # the inference's limit; the trainer's is share 70
PRIORITY_CASES = [  # (name, trainer kernel ns or 0: alone, inference's priority, trainer's)
    ("inference alone", 0, "high", ""),
    ("high beside low, 1 ms", MS, "high", "low"),
    ("high beside low, 10 ms", 10 * MS, "high", "low"),
    ("normal beside normal, 1 ms", MS, "normal", "normal"),
    ("normal beside normal, 10 ms", 10 * MS, "normal", "normal"),
]


def build_inference(cc: str, out: Path) -> Path:
    """Compile benchmarks/inference_load.c against the simulator's libcuda."""
    from compute_kit import cuda_include

    exe = out / "inference_load"
    source = Path(__file__).resolve().parent / "inference_load.c"
    subprocess.run(
        [cc, "-std=gnu11", "-O2", "-Wall", "-Werror", "-I", str(cuda_include()), str(source),
         "-o", str(exe), "-L", str(sim_lib_dir()), "-l:libcuda.so.1", "-lm"],
        check=True,
    )  # fmt: skip
    return exe


def priority_case(
    tmp: Path, load: Path, infer: Path, seconds: float, attribution: str, case: tuple
) -> dict:
    """One priority case on a machine of its own: the spec for `run_isolated`."""
    name, kernel_ns, infer_priority, trainer_priority = case
    slug = name.replace(" ", "_").replace(",", "")
    env = base_env(tmp, f"{slug}.state", 1, shim=True, attribution=attribution)
    report = tmp / f"{slug}.report"
    containers = [
        {
            "name": "inference",
            "ledger": str(tmp / slug / "inference"),
            "env": {},
            "conf": [*INFER_LIMIT, infer_priority],
            # it outlives the last window (the simulator forgets a process that has exited)
            "argv": [str(infer), str(INFER_NS), str(INFER_RATE), str(seconds + 0.5), str(report)],
            "seconds": seconds,
        }
    ]
    if kernel_ns:
        containers.append(
            {
                "name": "trainer",
                "ledger": str(tmp / slug / "trainer"),
                "env": {},
                "conf": [100 - INFER_LIMIT[0], "share", trainer_priority],
                "kernel_ns": kernel_ns,
                "seconds": seconds + 0.5,
            }
        )
    return {
        "sim_dir": str(sim_lib_dir()),
        "state": env["CGPU_SIM_STATE"],
        "load": str(load),
        "env": env,
        "containers": containers,
        "windows": one_second_windows(0.0, seconds),
        "arbiter": [],
        "report": str(report),
    }


def priority_report(specs: list[dict], results: list, seconds: float) -> None:
    """Print each priority case's latency and shares against the goals."""
    n = int(seconds)
    print(
        f"\npriority: {INFER_NS // MS} ms requests at {INFER_RATE:.0f}/s (Poisson), inference "
        f"{INFER_LIMIT[1]} {INFER_LIMIT[0]}, trainer share {100 - INFER_LIMIT[0]}; latency over "
        "the requests from the second second, shares per 1 s window from the second one"
    )
    alone_p99 = None
    for (name, kernel_ns, _, trainer_priority), spec, windows in zip(
        PRIORITY_CASES, specs, results, strict=True
    ):
        words = Path(spec["report"]).read_text().split()
        figures = dict(zip(words[::2], map(float, words[1::2]), strict=True))
        p99 = figures["p99"]
        line = f"  {name:30s} n {figures['requests']:4.0f}  p50 {figures['p50']:6.2f} ms"
        line += f"  p99 {p99:6.2f} ms  max {figures['max']:7.2f} ms"
        if not kernel_ns:
            alone_p99 = p99
            print(line)
            continue
        infer = [w["inference"] for w in windows[1:n]]
        kept = [w["trainer"] / max(1e-9, 100 - w["inference"]) for w in windows[1:n]]
        ratio = p99 / alone_p99 if alone_p99 else float("nan")
        line += f"  = {ratio:4.1f}x alone; inference {min(infer):4.1f}-{max(infer):4.1f}%"
        line += f", trainer keeps {100 * min(kept):5.1f}-{100 * max(kept):5.1f}% of the rest"
        if trainer_priority == "low":
            goal = 1.5 if kernel_ns == MS else 2.5
            ok = ratio <= goal and (kernel_ns != MS or min(kept) >= 0.8)
            line += f" ({'ok' if ok else 'MISSED'}: p99 <= {goal}x"
            line += ", trainer >= 80%)" if kernel_ns == MS else ")"
        print(line)


ELSEWHERE = "GPU-99999999-9999-9999-9999-999999999999"  # a GPU on no simulated machine


def latency(
    load: Path, tmp: Path, launches: int, arbiter: bool
) -> tuple[dict[str, dict[str, float]], dict[str, list[str]]]:
    """ns per launch by path (kernel, proc, direct): without the shim ("bare"), with it and no
    limit ("free"), with a `share` 50% limit ("limited"; under the arbiter: alone, the container
    holds the GPU and every launch takes the open gate). Under the arbiter also a hosted
    container on a GPU nobody limits ("plain", measured before the limit is written) and a
    best-effort one beside the limited one, which holds the GPU while that one is idle ("best
    effort"); and what the lookups of the launch entry points hand out to those two (issue 35)."""
    env0 = base_env(tmp, "latency.state", 1, shim=False)
    root = tmp / "latency"
    dirs = {k: root / k for k in ("free", "limited", "plain", "best effort", "elsewhere")}
    for directory in dirs.values():
        directory.mkdir(parents=True)
    host = None
    lookups: dict[str, list[str]] = {}
    figures: dict[str, dict[str, float]] = {p: {} for p in ("kernel", "proc", "direct")}

    def once(path: str, shim: bool, where: Path, extra: dict[str, str]) -> float:
        env = {**base_env(tmp, "latency.state", 1, shim), **extra, "CGPU_LEDGER_DIR": str(where)}
        out = subprocess.run(
            [str(load), "cost", path, str(launches)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return float(out.split()[-1])

    def lookup(where: Path) -> list[str]:
        env = {**base_env(tmp, "latency.state", 1, True), "CGPU_LEDGER_DIR": str(where)}
        out = subprocess.run(
            [str(load), "lookup"], env=env, check=True, capture_output=True, text=True
        ).stdout
        return [w.split("=")[1] for line in out.splitlines() for w in line.split()[1:]]

    limited = {"CGPU_COMPUTE_LIMIT": "50", "CGPU_COMPUTE_POLICY": "share"}
    kinds = {  # measured in turn for each path, so that they compare within one stretch
        "bare": (False, dirs["free"], {}),
        "free": (True, dirs["free"], {}),
        "limited": (True, dirs["limited"], limited),
    }
    try:
        if arbiter:
            from cgpu.core.config import write_config

            # This process binds NVML to the latency machine alone (the cases run in children).
            uuid = Nvml(sim_lib_dir(), Path(env0["CGPU_SIM_STATE"])).uuid(0)
            write_config(dirs["plain"], {uuid: 8 << 30}, {})
            write_config(dirs["elsewhere"], {ELSEWHERE: 8 << 30}, {ELSEWHERE: (30, "fixed")})
            host = Arbiter(root, env0, [])
            host.wait_for([dirs["elsewhere"]])  # it has seen the plain one too: no socket
            assert not (dirs["plain"] / "compute.sock").exists(), "a socket on an ungated GPU"
            lookups["plain"] = lookup(dirs["plain"])
            for path, row in figures.items():  # before its GPU is gated below
                row["plain"] = min(once(path, True, dirs["plain"], {}) for _ in range(3))
            write_config(dirs["limited"], {uuid: 8 << 30}, {uuid: (50, "share")})
            write_config(dirs["best effort"], {uuid: 8 << 30}, {})
            host.wait_for([dirs["limited"], dirs["best effort"]])
            lookups["best effort"] = lookup(dirs["best effort"])
            kinds["best effort"] = (True, dirs["best effort"], {})
        for path, row in figures.items():
            for kind, (shim, where, extra) in kinds.items():
                row[kind] = min(once(path, shim, where, extra) for _ in range(3))
    finally:
        if host:
            host.stop()
    return figures, lookups


def latency_lines(figures: dict[str, dict[str, float]]) -> list[str]:
    """The latency table's rows: ns per launch, and what the shim adds to the bare figure."""
    labels = {
        "free": "shim, no limit",
        "limited": "shim, 50% limit",
        "plain": "hosted, GPU not gated",
        "best effort": "shim, best effort",
    }
    lines = []
    for path, row in figures.items():
        lines.append(f"  {path + ' without the shim':44s} {row['bare']:8.1f}")
        for kind, label in labels.items():
            if kind in row:
                added = f"{path:6s} {label} (+{row[kind] - row['bare']:6.1f} ns)"
                lines.append(f"  {added:44s} {row[kind]:8.1f}")
    return lines


def band(values: list[float], target: float) -> str:
    worst = max(abs(v - target) for v in values)
    return (
        f"{min(values):4.1f}-{max(values):4.1f}, worst |x-{target:.0f}| = {worst:4.1f} "
        f"({'ok' if worst <= 5 else 'MISSED'})"
    )


def verdict(name: str, shares: list[float], long: list[float]) -> str:
    """The case's promise, over the windows it applies to (from the second one)."""
    goal, target = GOALS[name]
    if goal == "shown":
        return f"{min(shares[1:]):4.1f}-{max(shares[1:]):4.1f} (the ceiling; no goal)"
    if goal == "long":
        return "5 s windows: " + band(long, target)
    if goal == "at least":
        low = min(shares[1:])
        return f"lowest {low:4.1f} ({'ok' if low >= target else 'MISSED'}: >= {target:.0f})"
    if goal == "alone":
        both = shares[1 : int(STOP)]
        alone = shares[int(STOP) + 1 : int(BACK)]
        back = shares[int(BACK) + 2 :]
        ok = all(abs(v - 30) <= 5 for v in both + back) and all(v >= 90 for v in alone)
        return (
            f"with 70%: {min(both):4.1f}-{max(both):4.1f}; alone from {STOP + 1:.0f} s: "
            f"{min(alone):4.1f}; from {BACK + 2:.0f} s: {min(back):4.1f}-{max(back):4.1f} "
            f"({'ok' if ok else 'MISSED'})"
        )
    if goal == "until":
        return band(shares[1 : int(STOP)], target)
    if goal == "back":
        return band(shares[int(BACK) + 2 :], target)
    return band(shares[1:], target)


def shares_report(specs: list[dict], results: list, seconds: float, header: str) -> None:
    """Print the share cases' windows and verdicts (issue 23's table)."""
    n = int(seconds)
    print(header)
    print(f"{'case':34s} " + " ".join(f"{i:>5d}" for i in range(n)))
    for spec, per_window in zip(specs, results, strict=True):
        for c in spec["containers"]:
            shares = [w[c["name"]] for w in per_window[:n]]
            long = [w[c["name"]] for w in per_window[n:]]
            print(f"{c['name']:34s} " + " ".join(f"{v:5.1f}" for v in shares))
            print(f"{'':34s} {verdict(c['name'], shares, long)}")
        here = {c["name"] for c in spec["containers"]}
        for group in sorted({g for nm, g in GROUPS.items() if nm in here}):
            names = [nm for nm, g in GROUPS.items() if g == group]
            busy = [sum(w[nm] for nm in names) for w in per_window[1:n]]
            print(
                f"{'busy, ' + group:34s} lowest {min(busy):5.1f} "
                f"({'ok' if min(busy) >= 90 else 'MISSED'}: >= 90)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--launches", type=int, default=20_000)
    parser.add_argument("--no-arbiter", action="store_true", help="the shim's NVML controller")
    parser.add_argument(
        "--attribution",
        choices=("sampled", "exact"),
        default="sampled",
        help="NVML names one process per period where several ran, as a real H100 does "
        "(sampled), or gives each its own busy %% (exact)",
    )
    parser.add_argument(
        "--cases",
        choices=("all", "shares", "priority", "turns"),
        default="all",
        help="the share cases and the launch latency, the priority cases (issue 35 item 2), "
        "every container taking turns (issue 35 item 1; with the launch latency), or all",
    )
    parser.add_argument(
        "--turns-kernels",
        default="10us,1ms,50ms",
        help="kernel lengths of the turns mixes, comma-separated (us or ms; 1ms always adds "
        "the waking neighbour beside fixed 30)",
    )
    args = parser.parse_args()
    cases = {"shares", "priority", "turns"} if args.cases == "all" else {args.cases}
    arbiter = not args.no_arbiter
    if "turns" in cases and not arbiter:
        parser.error("--cases turns needs the arbiter (every container takes turns under it)")
    tmp = Path(tempfile.mkdtemp(prefix="cgpu-compute-"))
    try:
        load = build_load(shutil.which("cc") or "cc", sim_lib_dir(), tmp)
        if "priority" in cases:
            infer = build_inference(shutil.which("cc") or "cc", tmp)
            pspecs = [
                priority_case(tmp, load, infer, args.seconds, args.attribution, case)
                for case in PRIORITY_CASES
            ]
            presults = [run_isolated(spec) for spec in pspecs]  # one at a time
            priority_report(pspecs, presults, args.seconds)
        specs = machines(tmp, load, args.seconds, args.attribution, arbiter)
        specs = specs if "shares" in cases else []
        goals: dict = {}
        tspecs: list[dict] = []
        if "turns" in cases:
            tspecs, goals = turns_machines(
                tmp, load, args.seconds, sim_lib_dir(),
                lambda state: base_env(tmp, state, 4, shim=True, attribution=args.attribution),
                [kernel_ns(word) for word in args.turns_kernels.split(",")],
            )  # fmt: skip
        started = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(run_isolated, specs + tspecs))
        took = time.monotonic() - started
        if specs:
            how = "the compute arbiter" if arbiter else "the shim's NVML controller alone"
            shares_report(
                specs, results[: len(specs)], args.seconds,
                f"share of the GPU's time in each 1 s window (percent), {how}, NVML attribution "
                f"{args.attribution}; `share` 70% stops at {STOP:.0f} s, another arrives at "
                f"{BACK:.0f} s ({took:.0f} s)",
            )  # fmt: skip
        if tspecs:
            outcomes = turns_report(tspecs, results[len(specs) :], goals, args.seconds)
            print(f"turns: {sum(outcomes)} of {len(outcomes)} share goals met ({took:.0f} s)")
        if cases & {"shares", "turns"}:
            figures, lookups = latency(load, tmp, args.launches, arbiter)
            print("\nlaunch latency, ns per cuLaunchKernel (0 ns kernel, best of 3 x 5 rounds):")
            print("\n".join(latency_lines(figures)))
            if "turns" in cases:
                launch_verdicts(figures, lookups)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def kernel_ns(word: str) -> int:
    """A kernel length: "10us" or "50ms"."""
    for suffix, scale in (("us", 1000), ("ms", MS)):
        if word.strip().endswith(suffix) and word.strip()[: -len(suffix)].isdigit():
            return int(word.strip()[: -len(suffix)]) * scale
    raise SystemExit(f"kernel length {word!r}: a whole number of us or ms, such as 10us or 1ms")


if __name__ == "__main__":
    main()
