"""Run saturating containers on the simulator and measure their share of the GPU's time.

Shared by tests/shim/test_compute_limit.py and benchmarks/compute_share.py. A "container" is a
set of processes with one ledger directory (the shim's container-wide state). Shares come from the
simulator's own accounting of each process's kernel time (cgpuSimProcessBusyNs, read by this
process without the shim): exact, independent of the shim's bookkeeping and of the coarse NVML
samples the shim's controller works from.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent


def cuda_include() -> Path:
    """Directory of the real cuda.h."""
    for base in (
        os.environ.get("CUDA_HOME", ""),
        "/usr/local/cuda",
        *sorted(glob.glob("/usr/local/cuda-*"), reverse=True),
    ):
        if base and Path(base, "include", "cuda.h").is_file():
            return Path(base, "include")
    raise FileNotFoundError("cuda.h not found (set CUDA_HOME)")


def build_load(cc: str, sim_dir: Path, out: Path) -> Path:
    """Compile compute_load.c against the simulator's libcuda."""
    include = cuda_include()
    exe = out / "compute_load"
    subprocess.run(
        [
            cc,
            "-std=gnu11",
            "-O2",
            "-Wall",
            "-Werror",
            "-I",
            str(include),
            str(HERE / "compute_load.c"),
            "-o",
            str(exe),
            "-L",
            str(sim_dir),
            "-l:libcuda.so.1",
            "-ldl",
            "-lpthread",
        ],
        check=True,
    )
    return exe


class Nvml:
    """The simulator's NVML, loaded in this process (no shim here)."""

    def __init__(self, sim_dir: Path, state: Path) -> None:
        os.environ["CGPU_SIM_STATE"] = str(state)
        self.lib = ctypes.CDLL(str(sim_dir / "libnvidia-ml.so.1"))
        assert self.lib.nvmlInit_v2() == 0

    def handle(self, index: int) -> ctypes.c_void_p:
        h = ctypes.c_void_p()
        assert self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(h)) == 0
        return h

    def uuid(self, index: int) -> str:
        buf = ctypes.create_string_buffer(96)
        assert self.lib.nvmlDeviceGetUUID(self.handle(index), buf, 96) == 0
        return buf.value.decode()

    def share(self, index: int, pids: set[int], since_us: int, until_us: int) -> float:
        """The processes' busy share (percent) of device `index` in [since_us, until_us): the
        simulator's exact kernel time (cgpuSimProcessBusyNs), not NVML's coarse samples."""
        fn = self.lib.cgpuSimProcessBusyNs
        fn.restype = ctypes.c_ulonglong
        fn.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_ulonglong, ctypes.c_ulonglong]
        if until_us <= since_us:
            raise ValueError(f"an empty window [{since_us}, {until_us}) us: the reader fell behind")
        busy = sum(fn(index, pid, since_us, until_us) for pid in pids)
        return 100.0 * busy / ((until_us - since_us) * 1000)


@dataclass
class Container:
    """Processes sharing one ledger directory, each saturating the GPU."""

    name: str
    ledger: Path
    env: dict[str, str]
    processes: int = 1
    kernel_ns: int = 10_000
    seconds: float = 11.0
    path: str = "kernel"
    threads: int = 1  # launching threads per process (with kernel_ptsz: a stream each)
    device: int = 0  # the simulated GPU (CUDA_VISIBLE_DEVICES)
    start_after: float = 0.0  # seconds after the others
    idle_first: float = 0.0  # seconds its processes hold a context and launch nothing
    cycle: float = 0.0  # busy this long, then idle this long, and so on (0: always busy)
    pidns: bool = False  # its processes share a pid namespace of their own (unshare)
    # With pidns: meta.json names its init process, as the runtime hook records it, so the
    # host places its processes by their namespace even without a connected one.
    meta: bool = False
    # (percent, policy[, priority]): the host writes this compute limit into the container's
    # cgpu.conf, as the device plugin does (the arbiter reads only that); None: the
    # environment's, if any.
    conf: tuple[int, str] | tuple[int, str, str] | None = None
    # With no `conf`: the host still writes a cgpu.conf (a memory slice, no compute line), as
    # the device plugin does for a pod without a compute limit: best effort under the arbiter.
    hosted: bool = False
    # A program to run instead of compute_load (its whole argv), one per process
    argv: list[str] = field(default_factory=list)
    # (seconds from the start, signal name): sent to every process of the container then
    signals: list[tuple[float, str]] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)

    def write_conf(self, uuid: str) -> None:
        """The host's cgpu.conf for this container: an 8 GiB slice and its compute limit."""
        from cgpu.core.config import write_config

        self.ledger.mkdir(parents=True, exist_ok=True)
        if self.conf:
            write_config(self.ledger, {uuid: 8 << 30}, {uuid: tuple(self.conf)})
        elif self.hosted:
            write_config(self.ledger, {uuid: 8 << 30}, {})

    def start(self, load: Path) -> None:
        self.ledger.mkdir(parents=True, exist_ok=True)
        env = {
            **self.env,
            "CGPU_LEDGER_DIR": str(self.ledger),
            "CUDA_VISIBLE_DEVICES": str(self.device),
        }
        args = [str(load), "run", self.path, str(self.kernel_ns), str(self.seconds)]
        args += [str(self.threads), str(self.idle_first), str(self.cycle)]
        args = self.argv or args
        if self.pidns:
            # One namespace for all of them, as in a container: its init (sh, pid 1) starts
            # them and fails if any fails.  /proc stays the host's, as a host reader sees it.
            script = f'ps=""; for i in $(seq {self.processes}); do "$@" & ps="$ps $!"; done; '
            script += "rc=0; for p in $ps; do wait $p || rc=1; done; exit $rc"
            argv = [*unshare_pidns(), "sh", "-c", script, "sh", *args]
            self.procs = [
                subprocess.Popen(
                    argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
            ]
            if self.meta:
                self.record_init()
            return
        self.procs = [
            subprocess.Popen(
                args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(self.processes)
        ]

    def record_init(self, timeout: float = 5.0) -> None:
        """Write meta.json's init_pid and init_start_time: the namespace's sh (pid 1 there)."""
        from cgpu.core.containers import write_meta
        from cgpu.core.procfs import start_time

        deadline = time.monotonic() + timeout
        while True:
            shells = [p for p in descendants({p.pid for p in self.procs}) if _comm(p) == "sh"]
            started = start_time(shells[0]) if shells else None
            if shells and started is not None:
                write_meta(self.ledger, {"init_pid": shells[0], "init_start_time": started})
                return
            assert time.monotonic() < deadline, f"{self.name}: no init process"
            time.sleep(0.01)

    def pids(self) -> set[int]:
        """The container's processes as the host sees them (none before it starts)."""
        top = {p.pid for p in self.procs}
        if not self.pidns:
            return top
        return {pid for pid in descendants(top) if _comm(pid) == "compute_load"}

    def wait(self) -> list[str]:
        """Wait for every process; returns the failures (stderr of a non-zero exit, other than
        the SIGKILL it was sent)."""
        bad = []
        killed = -signal.SIGKILL if any(name == "SIGKILL" for _, name in self.signals) else 0
        for p in self.procs:
            _out, err = p.communicate(timeout=60)
            if p.returncode not in (0, killed):
                bad.append(f"{self.name} pid {p.pid} rc {p.returncode}: {err.strip()[-500:]}")
        return bad


def unshare_pidns() -> list[str]:
    """The command prefix that runs a program as pid 1 of a new pid namespace: `unshare --pid
    --fork` as root, else inside a user namespace of its own."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", "--pid", "--fork", *user]


def pidns_works() -> bool:
    """Whether this machine lets a test start a pid namespace."""
    try:
        out = subprocess.run(
            [*unshare_pidns(), "sh", "-c", "echo $$"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == "1"


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def descendants(roots: set[int]) -> set[int]:
    """Every live descendant of the given pids (from the host's /proc)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), set(roots)
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    return found


def now_us() -> int:
    """Now, rounded down to the simulator's 10 ms buckets (so busy time is read exactly)."""
    return time.time_ns() // 10_000_000 * 10_000


def one_second_windows(start: float, end: float) -> list[tuple[float, float]]:
    """Consecutive 1 s windows from `start` to `end` (seconds from the start)."""
    return [(start + i, start + i + 1.0) for i in range(int(end - start))]


def run(
    nvml: Nvml,
    load: Path,
    containers: list[Container],
    windows: list[tuple[float, float]],
) -> list[dict[str, float]]:
    """Start the containers together; for each (start, end) window, in seconds from the start
    (windows may overlap), the share (percent of its device's time) each container got."""
    t0 = time.monotonic()
    for c in containers:
        if not c.start_after:
            c.start(load)
    signals = [(at, name, i) for i, c in enumerate(containers) for at, name in c.signals]
    events = sorted(
        [(s, 0, i) for i, (s, _) in enumerate(windows)]
        + [(e, 1, i) for i, (_, e) in enumerate(windows)]
        + [(c.start_after, 2, i) for i, c in enumerate(containers) if c.start_after]
        + [(at, 3, k) for k, (at, _, _) in enumerate(signals)]
    )
    since: dict[int, int] = {}
    shares: list[dict[str, float]] = [{} for _ in windows]
    try:
        for at, is_end, i in events:
            time.sleep(max(0.0, t0 + at - time.monotonic()))
            if is_end == 2:
                containers[i].start(load)
                continue
            if is_end == 3:
                _, name, j = signals[i]
                for pid in containers[j].pids():
                    os.kill(pid, getattr(signal, name))
                continue
            if not is_end:
                since[i] = now_us()
                continue
            until = now_us()
            for c in containers:
                shares[i][c.name] = nvml.share(c.device, c.pids(), since[i], until)
    finally:
        failures = [f for c in containers for f in c.wait()]
    assert not failures, failures
    return shares


class Arbiter:
    """`cgpu compute-arbiter` for one simulated machine, over the containers' directories."""

    def __init__(self, root: Path, env: dict[str, str], args: list[str]) -> None:
        self.root = root
        self.log = root / "arbiter.log"
        root.mkdir(parents=True, exist_ok=True)
        host_env = {
            k: v for k, v in env.items() if k != "LD_PRELOAD" and not k.startswith("CGPU_COMPUTE")
        }
        command = [sys.executable, "-P", "-m", "cgpu.cli", "compute-arbiter"]
        self.proc = subprocess.Popen(
            [*command, "--containers", str(root), *args],
            env=host_env,
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("w"),
        )

    def wait_for(self, dirs: list[Path], timeout: float = 15.0) -> None:
        """Until the arbiter has a socket in every one of `dirs`."""
        deadline = time.monotonic() + timeout
        while not all((d / "compute.sock").exists() for d in dirs):
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"no compute.sock after {timeout} s"
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run_isolated(spec: dict) -> list[dict[str, float]]:
    """`run` in a fresh Python (NVML binds to one simulator state file per process).

    spec: sim_dir, state, load, env (the base environment), windows, and containers: dicts of
    Container's fields, with `env` holding the container's own variables. With `arbiter` (a
    list of extra arguments, possibly empty), a `cgpu compute-arbiter` serves the containers that
    have a `conf`, from the parent directory of their ledgers."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__)), json.dumps(spec)],
        env={k: v for k, v in spec["env"].items() if k != "LD_PRELOAD"},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _main(spec: dict) -> None:
    nvml = Nvml(Path(spec["sim_dir"]), Path(spec["state"]))
    containers = [
        Container(**{**c, "ledger": Path(c["ledger"]), "env": {**spec["env"], **c["env"]}})
        for c in spec["containers"]
    ]
    windows = [tuple(w) for w in spec["windows"]]
    arbiters: list[Arbiter] = []
    late = None
    if spec.get("arbiter") is not None:
        for c in containers:
            c.write_conf(nvml.uuid(c.device))
        managed = [c.ledger for c in containers if c.conf or c.hosted]

        def start() -> None:
            arbiters.append(Arbiter(managed[0].parent, spec["env"], list(spec["arbiter"])))

        if spec.get("arbiter_after"):  # the containers start first, the arbiter this much later
            late = threading.Timer(float(spec["arbiter_after"]), start)
            late.start()
        else:
            start()
            arbiters[0].wait_for(managed)
    try:
        print(json.dumps(run(nvml, Path(spec["load"]), containers, windows)))
    finally:
        if late:
            late.join()
        for arbiter in arbiters:
            arbiter.stop()


if __name__ == "__main__":
    _main(json.loads(sys.argv[1]))
