"""Independent check of issue 23's compute share with workload mixes the project did not use.

    /work/main/.venv/bin/python -P /work/wt/check23/check23.py [--seconds 12] [--parallel 2]
                                    [--machines A,B,C,D] [--attribution sampled|exact]

Reuses the project's public pieces (tests/shim/compute_kit.py: Container, Nvml, Arbiter,
now_us, cuda_include; cgpu.core.paths) exactly as benchmarks/compute_share.py does: one
simulated machine (4 GPUs, one state file, one `cgpu compute-arbiter`) per group of mixes, one
mix per GPU, a container = a ledger directory with the host's cgpu.conf compute line (plus
CGPU_COMPUTE_LIMIT/POLICY in its environment, as the benchmark sets). Shares are the simulator's
exact per-process kernel time (cgpuSimProcessBusyNs) in 1 s windows. The workers are
check_load.c (same CLI as compute_load's `run`, plus random kernel lengths and busy/idle phases
aligned with the windows). Nothing in the product is changed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MAIN = Path("/work/main")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(MAIN / "tests" / "shim"))
from cgpu.core.paths import shim_path, sim_lib_dir
from compute_kit import Arbiter, Container, Nvml, cuda_include, now_us

MS = 1_000_000
US = 1_000
BUSY_S, IDLE_S = 2.0, 1.0  # the alternating container

# ---------------------------------------------------------------------------------------------
# Mixes: (title, containers, checks). A container: name, limit (0: unlimited), policy, kernel
# length, and extras (processes, threads, path, env). A check: (label, kind, names, target,
# which windows) with kind "band" (|x - target| <= 5), "atleast" (x >= target); several names
# are summed.


def c(name, percent, policy, kernel_ns, **extra):
    return {"name": name, "percent": percent, "policy": policy, "kernel_ns": kernel_ns, **extra}


def u(ns: int) -> str:
    return f"{ns // MS} ms" if ns >= MS else f"{ns // US} us"


def mix_fixed20_share40_unl(k):
    t = f"fixed 20 + share 40 + unlimited, {u(k)}"
    return t, [c("F20", 20, "fixed", k), c("S40", 40, "share", k), c("U", 0, "", k)], [
        ("fixed 20: 20 +- 5", "band", ["F20"], 20, "all"),
        ("share 40: its limit 40 +- 5", "band", ["S40"], 40, "all"),
        ("unlimited >= 100-60-10 = 30 (bench rule)", "atleast", ["U"], 30, "all"),
        ("GPU busy >= 90", "atleast", ["F20", "S40", "U"], 90, "all"),
    ]


def mix_share50_unl(k):
    t = f"share 50 + unlimited, {u(k)}"
    return t, [c("S50", 50, "share", k), c("U", 0, "", k)], [
        ("share 50: its limit 50 +- 5", "band", ["S50"], 50, "all"),
        ("unlimited >= 100-50-10 = 40 (bench rule)", "atleast", ["U"], 40, "all"),
        ("GPU busy >= 90", "atleast", ["S50", "U"], 90, "all"),
    ]


def mix_fixed30_two_unl(k):
    t = f"fixed 30 + 2 unlimited, {u(k)}"
    return t, [c("F30", 30, "fixed", k), c("U1", 0, "", k), c("U2", 0, "", k)], [
        ("fixed 30: 30 +- 5", "band", ["F30"], 30, "all"),
        ("unlimited U1+U2 >= 60 (bench rule)", "atleast", ["U1", "U2"], 60, "all"),
        ("GPU busy >= 90", "atleast", ["F30", "U1", "U2"], 90, "all"),
    ]


def mix_share25_75(k):
    t = f"share 25 + share 75, {u(k)}"
    return t, [c("S25", 25, "share", k), c("S75", 75, "share", k)], [
        ("share 25: 25 +- 5", "band", ["S25"], 25, "all"),
        ("share 75: 75 +- 5", "band", ["S75"], 75, "all"),
        ("GPU busy >= 90", "atleast", ["S25", "S75"], 90, "all"),
    ]


RANDOM = {"CHECK_KMIN_NS": str(100 * US), "CHECK_KMAX_NS": str(30 * MS)}


def mix_random_share():
    t = "share 40 (random 100us-30ms) + share 60 (3 ms)"
    return t, [c("S40r", 40, "share", MS, env=RANDOM), c("S60", 60, "share", 3 * MS)], [
        ("share 40 random: 40 +- 5", "band", ["S40r"], 40, "all"),
        ("share 60: 60 +- 5", "band", ["S60"], 60, "all"),
        ("GPU busy >= 90", "atleast", ["S40r", "S60"], 90, "all"),
    ]


def mix_random_fixed_unl():
    t = "fixed 30 (random) + unlimited (random)"
    return t, [c("F30r", 30, "fixed", MS, env=RANDOM), c("Ur", 0, "", MS, env=RANDOM)], [
        ("fixed 30 random: 30 +- 5", "band", ["F30r"], 30, "all"),
        ("unlimited >= 60 (bench rule)", "atleast", ["Ur"], 60, "all"),
    ]


def mix_multi(k, small=30, big=70):
    t = f"share {small} (3 proc x 2 streams) + share {big} (1 proc), {u(k)}"
    multi = c(f"S{small}x6", small, "share", k, processes=3, threads=2, path="kernel_ptsz")
    return t, [multi, c(f"S{big}", big, "share", k)], [
        (f"share {small} 3x2: {small} +- 5", "band", [f"S{small}x6"], small, "all"),
        (f"share {big} 1 proc: {big} +- 5", "band", [f"S{big}"], big, "all"),
        ("GPU busy >= 90", "atleast", [f"S{small}x6", f"S{big}"], 90, "all"),
    ]


def mix_alternating(k):
    t = f"share 40 alternating 2 s busy/1 s idle + share 60 saturating, {u(k)}"
    alt = c("S40alt", 40, "share", k, env={"CHECK_BUSY_S": str(BUSY_S), "CHECK_IDLE_S": str(IDLE_S)})
    return t, [alt, c("S60sat", 60, "share", k)], [
        ("idle windows: saturating >= 90", "atleast", ["S60sat"], 90, "idle"),
        ("busy windows (all): alternating 40 +- 5", "band", ["S40alt"], 40, "busy"),
        ("busy windows (all): saturating 60 +- 5", "band", ["S60sat"], 60, "busy"),
        ("2nd busy window of each phase: alt 40 +- 5", "band", ["S40alt"], 40, "busy2"),
        ("2nd busy window of each phase: sat 60 +- 5", "band", ["S60sat"], 60, "busy2"),
    ]


def mix_mixed_lengths():
    t = "share 50 (3 ms) + share 50 (20 ms)"
    return t, [c("S50a3", 50, "share", 3 * MS), c("S50b20", 50, "share", 20 * MS)], [
        ("share 50, 3 ms: 50 +- 5", "band", ["S50a3"], 50, "all"),
        ("share 50, 20 ms: 50 +- 5", "band", ["S50b20"], 50, "all"),
        ("GPU busy >= 90", "atleast", ["S50a3", "S50b20"], 90, "all"),
    ]


def mix_fixed_long_unl_short():
    t = "fixed 30 (20 ms) + unlimited (3 ms)"
    return t, [c("F30l", 30, "fixed", 20 * MS), c("Us", 0, "", 3 * MS)], [
        ("fixed 30, 20 ms: 30 +- 5", "band", ["F30l"], 30, "all"),
        ("unlimited >= 60 (bench rule)", "atleast", ["Us"], 60, "all"),
    ]


def mix_limited_unl(percent, policy, k):
    """One limited container beside an unlimited one: the limit as the target."""
    t = f"{policy} {percent} + unlimited, {u(k)}"
    me = f"{policy[0].upper()}{percent}"
    return t, [c(me, percent, policy, k), c("U", 0, "", k)], [
        (f"{policy} {percent}: its limit {percent} +- 5", "band", [me], percent, "all"),
        (f"unlimited >= 100-{percent}-10 (bench rule)", "atleast", ["U"], 90 - percent, "all"),
    ]


def mix_fixed20_share40(k):
    t = f"fixed 20 + share 40, no unlimited (control for A0), {u(k)}"
    return t, [c("F20", 20, "fixed", k), c("S40", 40, "share", k)], [
        ("fixed 20: 20 +- 5", "band", ["F20"], 20, "all"),
        ("share 40: takes the rest, >= 75", "atleast", ["S40"], 75, "all"),
    ]


def mix_fixed20_fixed40_unl(k):
    t = f"fixed 20 + fixed 40 + unlimited, {u(k)}"
    return t, [c("F20", 20, "fixed", k), c("F40", 40, "fixed", k), c("U", 0, "", k)], [
        ("fixed 20: 20 +- 5", "band", ["F20"], 20, "all"),
        ("fixed 40: 40 +- 5", "band", ["F40"], 40, "all"),
        ("unlimited >= 100-60-10 = 30 (bench rule)", "atleast", ["U"], 30, "all"),
    ]


def machines() -> dict[str, list]:
    k3, k20 = 3 * MS, 20 * MS
    return {
        "A": [mix_fixed20_share40_unl(k3), mix_share50_unl(k3), mix_fixed30_two_unl(k3),
              mix_share25_75(k3)],
        "B": [mix_fixed20_share40_unl(k20), mix_share50_unl(k20), mix_fixed30_two_unl(k20),
              mix_share25_75(k20)],
        "C": [mix_random_share(), mix_random_fixed_unl(), mix_multi(k3), mix_alternating(k3)],
        "D": [mix_multi(k20), mix_alternating(k20), mix_mixed_lengths(),
              mix_fixed_long_unl_short()],
        "E": [mix_limited_unl(70, "share", k3), mix_limited_unl(60, "fixed", k3),
              mix_limited_unl(30, "share", k3), mix_fixed20_share40(k3)],
        "F": [mix_limited_unl(20, "fixed", k3), mix_fixed20_share40_unl(MS),
              mix_fixed20_fixed40_unl(k3), mix_limited_unl(40, "fixed", k3)],
    }


def windows_of(kind: str, n: int) -> list[int]:
    """Which 1 s windows a check judges (from the second one: window 0 holds the start)."""
    period = BUSY_S + IDLE_S
    busy = [i for i in range(1, n) if (i % period) < BUSY_S]
    if kind == "all":
        return list(range(1, n))
    if kind == "busy":
        return busy
    if kind == "busy2":
        return [i for i in busy if (i % period) >= 1.0]
    return [i for i in range(1, n) if (i % period) >= BUSY_S]  # idle


# ---------------------------------------------------------------------------------------------
# Running one machine (in a fresh Python: NVML binds to one state file per process).


def build(tmp: Path) -> Path:
    exe = tmp / "check_load"
    subprocess.run(
        ["cc", "-std=gnu11", "-O2", "-Wall", "-Werror", "-I", str(cuda_include()),
         str(HERE / "check_load.c"), "-o", str(exe), "-L", str(sim_lib_dir()),
         "-l:libcuda.so.1", "-ldl", "-lpthread", "-lm"],
        check=True,
    )
    return exe


def base_env(state: Path, attribution: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CGPU_", "LD_PRELOAD"))}
    env.update(
        LD_LIBRARY_PATH=str(sim_lib_dir()),
        CGPU_SIM_STATE=str(state),
        CGPU_SIM_DEVICES="4",
        CGPU_SIM_MEMORY="16GiB",
        CGPU_SIM_UTIL_ATTRIBUTION=attribution,
        LD_PRELOAD=str(shim_path()),
    )
    return env


def run_machine(spec: dict) -> list[dict[str, float]]:
    """Child: start the arbiter and every container, measure 1 s windows."""
    nvml = Nvml(sim_lib_dir(), Path(spec["state"]))
    seconds = spec["seconds"]
    containers = []
    for dev, (_title, members, _checks) in enumerate(spec["mixes"]):
        for m in members:
            own = dict(m.get("env", {}))
            conf = None
            if m["percent"]:
                own.update(CGPU_COMPUTE_LIMIT=str(m["percent"]), CGPU_COMPUTE_POLICY=m["policy"])
                conf = (m["percent"], m["policy"])
            containers.append(Container(
                name=f"{dev}:{m['name']}",
                ledger=Path(spec["root"]) / f"gpu{dev}_{m['name']}",
                env={**spec["env"], **own},
                processes=m.get("processes", 1),
                kernel_ns=m["kernel_ns"],
                seconds=seconds + 0.5,
                path=m.get("path", "kernel"),
                threads=m.get("threads", 1),
                device=dev,
                conf=conf,
            ))
    for ct in containers:
        ct.write_conf(nvml.uuid(ct.device))
    managed = [ct.ledger for ct in containers if ct.conf]
    arbiter = Arbiter(Path(spec["root"]), spec["env"], [])
    arbiter.wait_for(managed)
    load = Path(spec["load"])
    n = int(seconds)
    shares: list[dict[str, float]] = [{} for _ in range(n)]
    try:
        t0 = time.monotonic()
        for ct in containers:
            ct.env["CHECK_T0"] = f"{t0:.6f}"
            ct.start(load)
        for i in range(n):
            time.sleep(max(0.0, t0 + i - time.monotonic()))
            since = now_us()
            time.sleep(max(0.0, t0 + i + 1 - time.monotonic()))
            until = now_us()
            for ct in containers:
                shares[i][ct.name] = nvml.share(ct.device, ct.pids(), since, until)
    finally:
        failures = [f for ct in containers for f in ct.wait()]
        arbiter.stop()
    assert not failures, failures
    return shares


def isolated(spec: dict) -> list[dict[str, float]]:
    proc = subprocess.run(
        [sys.executable, "-P", str(Path(__file__)), "--child", json.dumps(spec)],
        check=False,
        env={k: v for k, v in spec["env"].items() if k != "LD_PRELOAD"},
        capture_output=True, text=True, timeout=180,
    )
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# Judging and the report.


def judge(check, per_window, dev: int, n: int) -> dict:
    label, kind, names, target, which = check
    idx = windows_of(which, n)
    vals = [sum(per_window[i][f"{dev}:{nm}"] for nm in names) for i in idx]
    if kind == "band":
        worst = max(abs(v - target) for v in vals)
        ok = worst <= 5
    else:
        worst = max(0.0, target - min(vals))
        ok = min(vals) >= target
    return {"label": label, "windows": idx, "values": [round(v, 1) for v in vals],
            "min": round(min(vals), 1), "max": round(max(vals), 1),
            "worst": round(worst, 1), "ok": ok}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--parallel", type=int, default=2, help="machines run at once (bench: 2)")
    ap.add_argument("--machines", default="A,B,C,D")
    ap.add_argument("--attribution", choices=("sampled", "exact"), default="sampled")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_machine(json.loads(args.child))))
        return
    tmp = Path(tempfile.mkdtemp(prefix="check23-"))
    all_m = machines()
    chosen = args.machines.split(",")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    try:
        load = build(tmp)
        specs = []
        for name in chosen:
            root = tmp / f"machine{name}"
            root.mkdir()
            env = base_env(tmp / f"machine{name}.state", args.attribution)
            specs.append({"root": str(root), "state": env["CGPU_SIM_STATE"], "env": env,
                          "load": str(load), "seconds": args.seconds, "mixes": all_m[name]})
        started = time.monotonic()
        with ThreadPoolExecutor(args.parallel) as pool:
            results = list(pool.map(isolated, specs))
        took = time.monotonic() - started
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = int(args.seconds)
    head = (f"check23 {stamp} UTC, {os.cpu_count()} CPUs, attribution {args.attribution}, "
            f"{args.parallel} machines at once, {took:.0f} s; window shares in percent")
    lines = [head]
    record = []
    for name, spec, per_window in zip(chosen, specs, results, strict=True):
        for dev, (title, members, checks) in enumerate(spec["mixes"]):
            lines.append(f"\n[{name}{dev}] {title}")
            lines.append(f"  {'':8s}" + "".join(f"{i:>6d}" for i in range(n)))
            for m in members:
                vals = [per_window[i][f"{dev}:{m['name']}"] for i in range(n)]
                lines.append(f"  {m['name']:8s}" + "".join(f"{v:6.1f}" for v in vals))
            verdicts = [judge(ch, per_window, dev, n) for ch in checks]
            for v in verdicts:
                lines.append(
                    f"    {v['label']:45s} windows {v['windows'][0]}..{v['windows'][-1]} "
                    f"({len(v['windows'])}): {v['min']:5.1f}-{v['max']:5.1f}, worst "
                    f"{v['worst']:4.1f}  {'met' if v['ok'] else 'MISSED'}"
                )
            record.append({"machine": name, "gpu": dev, "mix": title, "members": members,
                           "per_window": [{k.split(':', 1)[1]: round(x, 2)
                                           for k, x in w.items() if k.startswith(f"{dev}:")}
                                          for w in per_window], "verdicts": verdicts})
    text = "\n".join(lines)
    print(text)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / f"{stamp}.txt").write_text(text + "\n")
    (out / f"{stamp}.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
