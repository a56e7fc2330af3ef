"""The compute arbiter against hostile clients (issue 34, item 3), on the simulator with NVML
as coarse as a real GPU's, and the arbiter's own cost.

    python benchmarks/arbiter_hostile.py [--seconds 12] [--case flood|silent|...]...

Each case runs `cgpu compute-arbiter` over container directories on one simulated GPU. The
well-behaved containers are real processes under the shim (tests/shim/compute_load.c, 1 ms
kernels back to back, one process each: `fixed` 30 and `share` 70); their shares are the
simulator's exact kernel time per process, in 1 s windows from the second one. The hostile
containers are tests/compute/hostile_kit.py's clients, written from the wire format:

- flood: a `fixed` 5 container that opens as many connections as it may and floods them with
  valid and malformed packets (niced by 10, as its CPU is its cgroup's business); at 3 s a new
  container appears, and the time to its socket is shown; the arbiter's CPU over the run.
- silent: a `fixed` 10 container whose connections, once granted, never read or answer again.
- restart: the arbiter SIGKILLed at 3 s and started again at once; windows from 1 s after the
  new one answers.
- cost: the arbiter's CPU (% of one core), wakeups (context switches a second) and RSS, with
  four `share` 25 containers of two busy processes each, then with 16 idle containers (each
  with one connected process that launches nothing).
- many: `fixed` 30 of 16 processes with 50 ms kernels, alone, then beside a `share` 70 of one
  process with 1 ms kernels: its 5 s windows (goal 30 +- 5) and whether a second gave it 0.
- outofturn (issue 34, item 1): `fixed` 30 `off`, whose process also launches straight through
  libcuda.so.1 (path `mixed`: one thread gated, one not), beside `fixed` 30 `n` and `share` 40
  `s`; `--runs` times: when the arbiter first charged `off` (its log), and the windows from 3 s.
- beside: `fixed` 30 and `share` 40 that follow the protocol beside an unmanaged saturating
  process (a container without a cgpu.conf), `--beside-seconds` (600): whether either is ever
  flagged or charged (the status file, every second), their windows, the probes asked for.

Goals (issue 34): 30 +- 5 and >= 60 beside the flood, a new socket within 1 s; within 5 beside
a silent holder and from 1 s after a restart; CPU <= 2% of a core busy, <= 0.5% idle; RSS <= 30
MiB.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from cgpu.core.config import write_config
from cgpu.core.paths import shim_path, sim_lib_dir

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "shim"))
sys.path.insert(0, str(HERE.parent / "tests" / "compute"))
import hostile_kit as hk  # noqa: E402
from compute_kit import Arbiter, Container, Nvml, build_load  # noqa: E402

MS = 1_000_000
CASES = ("flood", "silent", "restart", "cost", "many", "outofturn", "beside")
DEFAULT_CASES = ("flood", "silent", "restart", "cost")  # the two long ones on request


def sim_env(tmp: Path) -> dict[str, str]:
    """The simulator with one 16 GiB GPU, NVML attribution sampled (as a real H100)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CGPU_", "LD_PRELOAD"))}
    env.update(
        LD_LIBRARY_PATH=str(sim_lib_dir()),
        CGPU_SIM_STATE=str(tmp / "sim.state"),
        CGPU_SIM_DEVICES="1",
        CGPU_SIM_MEMORY="16GiB",
        CGPU_SIM_UTIL_ATTRIBUTION="sampled",
        LD_PRELOAD=str(shim_path()),
        # the outofturn case's `mixed` path: libcuda.so.1 by its absolute path, past the gate
        CGPU_TEST_RAW_LIBCUDA=str(sim_lib_dir() / "libcuda.so.1"),
    )
    return env


class Machine:
    """The simulated GPU, one case's containers' root and its arbiter."""

    def __init__(self, root: Path, load: Path, env: dict[str, str], nvml: Nvml) -> None:
        self.load, self.env, self.nvml = load, env, nvml
        self.root = root
        self.root.mkdir(parents=True)
        self.uuid = self.nvml.uuid(0)
        self.arbiter: Arbiter | None = None
        self.busy: list[Container] = []

    def hostile(self, name: str, percent: int, policy: str) -> Path:
        directory = self.root / name
        directory.mkdir()
        write_config(directory, {self.uuid: 8 << 30}, {self.uuid: (percent, policy)})
        return directory

    def container(
        self, name: str, conf: tuple[int, str] | None, seconds: float, kernel_ns: int = MS, **extra
    ) -> Container:
        c = Container(
            name=name,
            ledger=self.root / name,
            env=dict(self.env),
            kernel_ns=kernel_ns,
            seconds=seconds,
            conf=conf,
            **extra,
        )
        c.write_conf(self.uuid)
        self.busy.append(c)
        return c

    def start_arbiter(self, args: list[str] | None = None) -> Arbiter:
        self.arbiter = Arbiter(self.root, self.env, args or [])
        self.arbiter.wait_for([c.ledger for c in self.busy if c.conf])
        return self.arbiter

    def windows(self, t0: float, count: int) -> list[dict[str, float]]:
        """Each busy container's share in `count` 1 s windows from t0 (waits for them)."""
        out = []
        wall0 = time.time() - (time.monotonic() - t0)  # t0 on the simulator's clock
        for i in range(count):
            # Fixed boundaries (the simulator's 10 ms buckets), read once the window is over: a
            # reader that falls behind reads late, never a shorter window.
            since, until = (int((wall0 + i + k) * 100) * 10_000 for k in (0, 1))
            time.sleep(max(0.0, t0 + i + 1.02 - time.monotonic()))
            out.append({c.name: self.nvml.share(0, c.pids(), since, until) for c in self.busy})
        return out

    def close(self) -> list[str]:
        failures = [f for c in self.busy for f in c.wait()]
        if self.arbiter:
            self.arbiter.stop()
        return failures


def table(rows: list[dict[str, float]], goals: dict[str, tuple[str, float]]) -> None:
    names = list(rows[0]) if rows else []
    print(f"  {'container':12s} " + " ".join(f"{i + 1:>5d}" for i in range(len(rows))))
    for name in names:
        got = [round(r[name], 1) for r in rows]
        kind, target = goals[name]
        if kind == "band":
            ok = all(abs(v - target) <= 5 for v in got)
            goal = f"{target:.0f} +- 5"
        else:
            ok = all(v >= target for v in got)
            goal = f">= {target:.0f}"
        verdict = "ok" if ok else "MISSED"
        print(f"  {name:12s} " + " ".join(f"{v:5.1f}" for v in got) + f"   {verdict} ({goal})")


def neighbours(m: Machine, seconds: float) -> None:
    m.container("fixed30", (30, "fixed"), seconds)
    m.container("share70", (70, "share"), seconds)


def case_flood(m: Machine, seconds: float) -> None:
    neighbours(m, seconds + 1)
    h = m.hostile("flooder", 5, "fixed")
    arbiter = m.start_arbiter()
    hk.connectable(h, 10)
    for c in m.busy:
        c.start(m.load)
    flooder = hk.Role("flood", m.uuid, str(h), nice=10)
    appeared: list[float] = []

    def newcomer() -> None:
        time.sleep(3.0)
        appeared.append(hk.connectable(m.hostile("newcomer", 10, "share"), 10))

    with hk.roles(flooder):
        t0 = time.monotonic()
        cpu0 = hk.cpu_seconds(arbiter.proc.pid)
        later = threading.Thread(target=newcomer)
        later.start()
        rows = m.windows(t0 + 1, int(seconds) - 1)
        cpu = (hk.cpu_seconds(arbiter.proc.pid) - cpu0) / (time.monotonic() - t0)
        counts = flooder.finish()
        later.join()
    print(f"flood: {counts}")
    print(f"  arbiter CPU {cpu:.1%} of a core; a new container's socket in {appeared[0]:.3f} s")
    table(rows, {"fixed30": ("band", 30), "share70": ("least", 60)})


def case_silent(m: Machine, seconds: float) -> None:
    neighbours(m, seconds + 1)
    s = m.hostile("silent", 10, "fixed")
    m.start_arbiter()
    hk.connectable(s, 10)
    for c in m.busy:
        c.start(m.load)
    holder = hk.Role("silent", m.uuid, str(s))
    with hk.roles(holder):
        t0 = time.monotonic()
        rows = m.windows(t0 + 1, int(seconds) - 1)
        counts = holder.finish()
    print(f"silent holder (fixed 10): {counts}")
    table(rows, {"fixed30": ("band", 30), "share70": ("least", 60)})


def case_restart(m: Machine, seconds: float) -> None:
    neighbours(m, seconds + 6)
    arbiter = m.start_arbiter()
    for c in m.busy:
        c.start(m.load)
    time.sleep(3.0)
    arbiter.proc.kill()
    arbiter.proc.wait()
    killed = time.monotonic()
    m.start_arbiter()
    up = killed + hk.connectable(m.busy[0].ledger, 10)
    print(f"restart: the new arbiter answered {up - killed:.2f} s after the SIGKILL")
    rows = m.windows(up + 1, int(seconds) - 1)
    table(rows, {"fixed30": ("band", 30), "share70": ("band", 70)})


def _context_switches(pid: int) -> int:
    """Voluntary context switches of every thread: how often it slept and woke."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


def _cost(pid: int, seconds: float) -> tuple[float, float, float]:
    """CPU (fraction of a core), wakeups a second and RSS (MiB) of `pid` over `seconds`."""
    cpu0, ctx0, t0 = hk.cpu_seconds(pid), _context_switches(pid), time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    cpu = (hk.cpu_seconds(pid) - cpu0) / elapsed
    return cpu, (_context_switches(pid) - ctx0) / elapsed, hk.rss_mib(pid)


def case_cost(m: Machine, seconds: float) -> None:
    for i in range(4):
        m.container(f"share25-{i}", (25, "share"), seconds + 3, processes=2)
    arbiter = m.start_arbiter()
    for c in m.busy:
        c.start(m.load)
    time.sleep(2.0)
    cpu, wakeups, rss = _cost(arbiter.proc.pid, seconds)
    print("cost, four share 25 containers of two busy processes each:")
    print(
        f"  CPU {cpu:.2%} of a core ({'ok' if cpu <= 0.02 else 'MISSED'}: <= 2%), "
        f"{wakeups:.0f} wakeups/s, RSS {rss:.1f} MiB ({'ok' if rss <= 30 else 'MISSED'}: <= 30)"
    )
    failures = m.close()
    m.busy, m.arbiter = [], None
    assert not failures, failures
    idle = [m.hostile(f"idle{i:02d}", 5, "share") for i in range(16)]
    arbiter = m.start_arbiter()
    conns = []
    for directory in idle:
        hk.connectable(directory, 10)
        sock = hk.connect(directory)
        sock.sendall(hk.hello())
        sock.sendall(hk.dev(0, m.uuid))
        conns.append(sock)
    time.sleep(2.0)
    cpu, wakeups, rss = _cost(arbiter.proc.pid, seconds)
    print("cost, 16 idle containers (one connected process each):")
    print(
        f"  CPU {cpu:.2%} of a core ({'ok' if cpu <= 0.005 else 'MISSED'}: <= 0.5%), "
        f"{wakeups:.0f} wakeups/s, RSS {rss:.1f} MiB ({'ok' if rss <= 30 else 'MISSED'}: <= 30)"
    )
    for sock in conns:
        sock.close()


def case_many(m: Machine, seconds: float) -> None:
    seconds = max(seconds, 11.0)
    for beside in (False, True):
        r = Machine(m.root / ("beside" if beside else "alone"), m.load, m.env, m.nvml)
        try:
            r.container("fixed30x16", (30, "fixed"), seconds + 1, 50 * MS, processes=16)
            if beside:
                r.container("share70", (70, "share"), seconds + 1)
            r.start_arbiter()
            for c in r.busy:
                c.start(r.load)
            t0 = time.monotonic()
            rows = r.windows(t0 + 1, int(seconds) - 1)
        finally:
            failures = r.close()
        assert not failures, failures
        got = [row["fixed30x16"] for row in rows]
        fives = [sum(got[i : i + 5]) / 5 for i in range(len(got) - 4)]
        five_ok = all(abs(v - 30) <= 5 for v in fives)
        print(
            f"many: fixed 30 of 16 processes, 50 ms kernels{' beside share 70' if beside else ''}"
        )
        print(
            f"  5 s windows {' '.join(f'{v:.1f}' for v in fives)} ({'ok' if five_ok else 'MISSED'}"
            f": 30 +- 5); lowest second {min(got):.1f} ({'MISSED' if min(got) == 0 else 'ok'}: > 0)"
        )
        table(rows, {"fixed30x16": ("least", 0), "share70": ("least", 0)})


def _first_charge(log: Path, since: float) -> float | None:
    """Seconds from `since` (time.time()) to the arbiter's first out-of-turn charge (its log)."""
    for line in log.read_text().splitlines():
        if "out-of-turn work" in line and "charged" in line:
            at = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            return at - since
    return None


def case_outofturn(m: Machine, seconds: float, runs: int = 5) -> None:
    seconds = max(seconds, 10.0)
    flags: list[float | None] = []
    held = 0
    for run in range(runs):
        r = Machine(m.root / f"run{run}", m.load, m.env, m.nvml)
        try:
            r.container("off", (30, "fixed"), seconds + 1, path="mixed", threads=2)
            r.container("n", (30, "fixed"), seconds + 1)
            r.container("s", (40, "share"), seconds + 1)
            r.start_arbiter()
            t0, since = time.monotonic(), time.time()
            for c in r.busy:
                c.start(r.load)
            rows = r.windows(t0, int(seconds))
        finally:
            failures = r.close()
        assert not failures, failures
        assert r.arbiter is not None
        flag = _first_charge(r.arbiter.log, since)
        flags.append(flag)
        after = rows[3:]
        n_ok = all(abs(row["n"] - 30) <= 5 for row in after)
        fives = [sum(row["off"] for row in after[i : i + 5]) / 5 for i in range(len(after) - 4)]
        off_ok = all(v <= 35 for v in fives)
        ok = flag is not None and flag <= 3.0 and n_ok and off_ok
        held += ok
        shown = "never" if flag is None else f"{flag:.2f} s"
        print(f"outofturn run {run + 1}: first charged at {shown}; every goal held: {ok}")
        print(f"  off 5 s windows from 3 s: {' '.join(f'{v:.1f}' for v in fives)} (<= 35)")
        table(rows, {"off": ("band", 30), "n": ("band", 30), "s": ("least", 0)})
    known = sorted(f for f in flags if f is not None)
    print(f"outofturn: flagged (first charge) at {', '.join(f'{f:.2f}' for f in known)} s; ")
    print(f"  {sum(f <= 3.0 for f in known)} of {runs} within 3 s; all goals in {held} of {runs}")


def case_beside(m: Machine, seconds: float) -> None:
    m.container("fixed30", (30, "fixed"), seconds + 3)
    m.container("share40", (40, "share"), seconds + 3)
    m.container("unmanaged", None, seconds + 3)  # no cgpu.conf: no container of the arbiter's
    status = m.root / "status.json"
    m.start_arbiter(["--status", str(status)])
    for c in m.busy:
        c.start(m.load)
    t0 = time.monotonic() + 1
    worst: dict[str, list[float]] = {}
    seen_flag: list[str] = []
    last: dict = {}
    for i in range(int(seconds) - 1):
        (row,) = m.windows(t0 + i, 1)
        for name, value in row.items():
            low, high = worst.setdefault(name, [value, value])
            worst[name] = [min(low, value), max(high, value)]
        try:
            last = json.loads(status.read_text())
        except (OSError, ValueError):
            continue
        for gpu in last.get("gpus", {}).values():
            for path, figures in gpu.get("containers", {}).items():
                if figures.get("over_compute") or figures.get("out_of_turn_s", 0) > 0:
                    seen_flag.append(f"{Path(path).name} at {i + 1} s: {figures}")
    print(f"beside an unmanaged saturating process, {seconds:.0f} s (status read every second):")
    for name, (low, high) in worst.items():
        print(f"  {name:10s} windows {low:.1f}-{high:.1f}")
    for gpu in last.get("gpus", {}).values():
        print(f"  probes {gpu.get('probes')} ({gpu.get('probe_ms')} ms)")
        for path, figures in gpu.get("containers", {}).items():
            name, ot = Path(path).name, figures.get("out_of_turn_s")
            flagged = figures.get("over_compute")
            print(f"  {name}: host {figures.get('host_percent')}%, out of turn {ot} s, {flagged=}")
    verdict = "MISSED" if seen_flag else "ok"
    print(f"  flagged or charged: {seen_flag[:3] or 'never'} ({verdict}: never)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument(
        "--case", action="append", choices=CASES, help=f"(default: {', '.join(DEFAULT_CASES)})"
    )
    parser.add_argument("--runs", type=int, default=5, help="outofturn: runs")
    parser.add_argument("--beside-seconds", type=float, default=600.0, help="beside: length")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="cgpu-hostile-"))
    try:
        load = build_load(shutil.which("cc") or "cc", sim_lib_dir(), tmp)
        env = sim_env(tmp)
        nvml = Nvml(sim_lib_dir(), Path(env["CGPU_SIM_STATE"]))
        print(f"arbiter_hostile: {args.seconds:.0f} s a case, {os.cpu_count()} CPUs")
        for name in args.case or DEFAULT_CASES:
            machine = Machine(tmp / name, load, env, nvml)
            try:
                if name == "outofturn":
                    case_outofturn(machine, args.seconds, args.runs)
                elif name == "beside":
                    case_beside(machine, args.beside_seconds)
                else:
                    globals()[f"case_{name}"](machine, args.seconds)
            finally:
                failures = machine.close()
            if failures:
                print(f"  failures: {failures}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
