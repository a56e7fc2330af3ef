"""Issue 35 item 1, every container on a gated GPU takes turns: the mixes of its goal table for
benchmarks/compute_share.py (`--cases turns`), and their verdicts.

A container without a compute limit is `hosted` here: the host writes its cgpu.conf with a memory
slice and no compute line, as the device plugin does, so on a GPU where a neighbour has a limit
it is best effort under the arbiter. `fixed` 60 beside one, `fixed` 30 beside two and `fixed` 20
+ `share` 40 beside one run with 10 us, 1 ms and 50 ms kernels (50 ms: judged over 5 s windows,
as kernels longer than the arbiter's 20 ms quantum are); a neighbour that wakes and idles every
1.5 s (beside `fixed` 30 and `fixed` 20) and two saturating best-effort containers beside an idle
limited one (a process that holds a context and launches nothing, or no process) run with 1 ms
kernels.
"""

from __future__ import annotations

from pathlib import Path

from compute_kit import one_second_windows

MS = 1_000_000
CYCLE = 1.5  # the waking neighbour's busy and idle phases, seconds
TOL = 5.0

QUANTUM_NS = 20 * MS  # the arbiter's default: longer kernels are judged over 5 s windows

# name -> (kind, figure, names): "band" (figure +- 5), "at least" (>= figure), "even" (within 5
# of names[0]), "rest" (it gets what is left: it and names together leave at most 5 of the GPU
# idle, as 60 + 35 in the first row), "busy" (it and names together >= figure), "busy shown"
# (their sum, no goal), "shown" (no goal).
Goal = tuple[str, float, tuple[str, ...]]


def _unit(ns: int) -> str:
    return f"{ns // MS} ms" if ns >= MS else f"{ns // 1000} us"


def _container(
    name: str, device: int, conf: tuple[int, str] | None, kernel_ns: int, seconds: float,
    **extra: object,
) -> dict:  # fmt: skip
    """One container of one saturating process; without `conf`, best effort (`hosted`)."""
    return {
        "name": name,
        "env": {},
        "conf": list(conf) if conf else None,
        "hosted": conf is None,
        "processes": 1,
        "kernel_ns": kernel_ns,
        "seconds": seconds + 0.5,  # it outlives the last window
        "device": device,
        **extra,
    }


def _mixes(kernel_ns: int, seconds: float, goals: dict[str, Goal]) -> list[dict]:
    """The first three rows of the goal table, one per GPU, with one kernel length."""
    u, k, t = _unit(kernel_ns), kernel_ns, seconds
    names = {
        "f60": f"fixed 60 + unl.: 60, {u}",
        "u60": f"fixed 60 + unl.: unl, {u}",
        "f30": f"fixed 30 + 2 unl.: 30, {u}",
        "a": f"fixed 30 + 2 unl.: unl a, {u}",
        "b": f"fixed 30 + 2 unl.: unl b, {u}",
        "f20": f"f20 + s40 + unl.: 20, {u}",
        "s40": f"f20 + s40 + unl.: 40, {u}",
        "u20": f"f20 + s40 + unl.: unl, {u}",
    }
    n = names
    goals.update({
        n["f60"]: ("band", 60.0, ()),
        n["u60"]: ("at least", 35.0, ()),
        n["f30"]: ("band", 30.0, ()),
        n["a"]: ("busy shown", 0.0, (n["f30"], n["b"])),
        n["b"]: ("even", 0.0, (n["a"],)),
        n["f20"]: ("band", 20.0, ()),
        n["s40"]: ("at least", 35.0, ()),
        n["u20"]: ("rest", 0.0, (n["f20"], n["s40"])),
    })  # fmt: skip
    return [
        _container(n["f60"], 0, (60, "fixed"), k, t),
        _container(n["u60"], 0, None, k, t),
        _container(n["f30"], 1, (30, "fixed"), k, t),
        _container(n["a"], 1, None, k, t),
        _container(n["b"], 1, None, k, t),
        _container(n["f20"], 2, (20, "fixed"), k, t),
        _container(n["s40"], 2, (40, "share"), k, t),
        _container(n["u20"], 2, None, k, t),
    ]


def _waking_beside_fixed30(seconds: float, goals: dict[str, Goal]) -> list[dict]:
    """The waking neighbour beside `fixed` 30 (GPU 3 of the 1 ms machine)."""
    fixed, waking = "fixed 30 + waking unl.: 30", "fixed 30 + waking unl.: unl"
    goals[fixed] = ("band", 30.0, ())
    goals[waking] = ("shown", 0.0, ())
    return [
        _container(fixed, 3, (30, "fixed"), MS, seconds),
        _container(waking, 3, None, MS, seconds, cycle=CYCLE),
    ]


def _best_effort_machine(seconds: float, goals: dict[str, Goal]) -> list[dict]:
    """Two saturating best-effort containers beside an idle `fixed` 30 one, whose process holds
    a context and launches nothing (GPU 0: gated, and theirs; its shim never connects, so the
    arbiter may probe for it), and beside a `fixed` 30 one with no process (GPU 2: its
    cgpu.conf alone gates the GPU); the waking neighbour beside `fixed` 20 (GPU 1)."""
    t = seconds
    fixed, waking = "fixed 20 + waking unl.: 20", "fixed 20 + waking unl.: unl"
    goals[fixed] = ("band", 20.0, ())
    goals[waking] = ("shown", 0.0, ())
    out = [
        _container(fixed, 1, (20, "fixed"), MS, t),
        _container(waking, 1, None, MS, t, cycle=CYCLE),
    ]
    idlers = ((0, "idle", {"idle_first": t + 0.5}), (2, "no proc.", {"processes": 0}))
    for device, what, extra in idlers:
        idle = f"2 unl. + {what} fixed 30: fixed"
        a, b = f"2 unl. + {what} fixed 30: unl a", f"2 unl. + {what} fixed 30: unl b"
        goals.update({idle: ("shown", 0.0, ()), a: ("busy", 95.0, (b,)), b: ("even", 0.0, (a,))})
        out += [
            _container(idle, device, (30, "fixed"), MS, t, **extra),
            _container(a, device, None, MS, t),
            _container(b, device, None, MS, t),
        ]
    return out


def turns_machines(
    tmp: Path, load: Path, seconds: float, sim_dir: Path, env_for, kernels: list[int]
) -> tuple[list[dict], dict[str, Goal]]:
    """The simulated machines (specs for `run_isolated`, each with the arbiter) and each
    container's goal. `env_for(state)`: the base environment of a machine of 4 GPUs."""
    goals: dict[str, Goal] = {}
    groups = [_mixes(k, seconds, goals) for k in kernels]
    if MS in kernels:
        groups[kernels.index(MS)] += _waking_beside_fixed30(seconds, goals)
    groups.append(_best_effort_machine(seconds, goals))
    n = int(seconds)
    specs = []
    for m, containers in enumerate(groups):
        for c in containers:
            slug = c["name"].replace(" ", "_").replace(":", "").replace(",", "").replace("+", "")
            c["ledger"] = str(tmp / f"turns{m}" / slug.replace(".", ""))
        env = env_for(f"turns{m}.state")
        windows = one_second_windows(0.0, seconds)
        if any(c["kernel_ns"] > QUANTUM_NS for c in containers):
            windows += [(1.0 + 5 * i, 6.0 + 5 * i) for i in range((n - 1) // 5)]
        specs.append({
            "sim_dir": str(sim_dir),
            "state": env["CGPU_SIM_STATE"],
            "load": str(load),
            "env": env,
            "containers": containers,
            "windows": windows,
            "arbiter": [],
        })  # fmt: skip
    return specs, goals


def _span(values: list[float]) -> str:
    return f"{min(values):5.1f}-{max(values):5.1f}"


def _ok(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def turn_verdict(goal: Goal, mine: list[float], others: list[list[float]]) -> str:
    """One container's goal over its windows (`others`: those of the containers it names)."""
    kind, figure, _ = goal
    if kind == "shown":
        return f"{_span(mine)} (no goal)"
    if kind == "band":
        worst = max(abs(v - figure) for v in mine)
        return f"{_span(mine)}, worst |x-{figure:.0f}| = {worst:4.1f} ({_ok(worst <= TOL)})"
    if kind == "at least":
        return f"lowest {min(mine):5.1f} ({_ok(min(mine) >= figure)}: >= {figure:.0f})"
    if kind == "even":
        gap = max(abs(x - y) for x, y in zip(mine, others[0], strict=True))
        return f"{_span(mine)}, worst gap to its twin {gap:4.1f} ({_ok(gap <= TOL)}: <= 5)"
    together = [sum(vs) for vs in zip(mine, *others, strict=True)]
    if kind == "busy shown":
        return f"{_span(mine)}, GPU busy lowest {min(together):5.1f} (no goal)"
    if kind == "rest":
        idle = max(100 - v for v in together)
        return (
            f"{_span(mine)}, GPU left idle at most {idle:4.1f} ({_ok(idle <= TOL)}: "
            "it gets what is left, within 5)"
        )
    busy = min(together)
    return f"{_span(mine)}, GPU busy lowest {busy:5.1f} ({_ok(busy >= figure)}: >= {figure:.0f})"


def turns_report(
    specs: list[dict], results: list[list[dict[str, float]]], goals: dict[str, Goal], seconds: float
) -> list[bool]:
    """Print each container's shares per window and its verdict; returns each goal's outcome."""
    n = int(seconds)
    outcomes = []
    print(
        "\nturns (issue 35 item 1): share of the GPU's time in each 1 s window (percent), the "
        "compute arbiter, `unl.` = no compute limit (best effort); goals from the second window"
    )
    print(f"{'case':34s} " + " ".join(f"{i:>5d}" for i in range(n)))
    for spec, per_window in zip(specs, results, strict=True):
        for c in spec["containers"]:
            name = c["name"]
            goal = goals[name]
            shares = [w[name] for w in per_window[:n]]
            # from the second 1 s window; or, with kernels past the quantum, the 5 s windows
            judged = per_window[n:] or per_window[1:n]
            others = [[w[o] for w in judged] for o in goal[2]]
            line = turn_verdict(goal, [w[name] for w in judged], others)
            if per_window[n:]:
                line = f"5 s windows: {line}; 1 s windows {_span(shares[1:])}"
            print(f"{name:34s} " + " ".join(f"{v:5.1f}" for v in shares))
            print(f"{'':34s} {line}")
            if not goal[0].endswith("shown"):
                outcomes.append(line.count("MISSED") == 0)
    return outcomes


def launch_verdicts(figures: dict[str, dict[str, float]], lookups: dict[str, list[str]]) -> None:
    """The goal table's launch rows: nothing hooked where nobody limits the GPU, and <= 20 ns
    added per launch while holding the GPU (with a limit, and best effort)."""
    plain = lookups.get("plain", [])
    best = lookups.get("best effort", [])
    print("\nturns: launches")
    print(
        f"  no limit on the GPU (a hosted container, the arbiter running): {len(plain)} "
        f"lookups of launch entry points (dlsym, cuGetProcAddress) give {sorted(set(plain))} "
        f"({_ok(bool(plain) and set(plain) == {'driver'})}: the driver's own, 0 ns added)"
    )
    print(
        f"  best effort on a gated GPU: lookups give {sorted(set(best))} "
        f"({_ok(bool(best) and set(best) == {'shim'})}: gated)"
    )
    for path, row in figures.items():
        added = {k: row[k] - row["bare"] for k in row if k != "bare"}
        words = ", ".join(f"{k} {v:+.1f}" for k, v in added.items())
        holding = [added[k] for k in ("limited", "best effort") if k in added]
        print(
            f"  {path:6s} ns added: {words} "
            f"({_ok(all(v <= 20 for v in holding))}: <= 20 while holding)"
        )
