"""Chaos for the ledger (issue 11).

For CGPU_CHAOS_SECONDS (20 by default) a driver SIGKILLs the processes of one container at
random moments and starts new ones, SIGSTOPs and SIGCONTs them many times a second (so some
stops land inside the ledger's lock), and tampers with the ledger, while every process
churns random allocations at the edge of its slice and forks children that allocate and
exit.  A neighbour container on the same simulated GPU holds a fixed amount throughout.

What must hold:
- readers never see more than the slice (a thread reads the ledger all along);
- the container never holds more than its slice on the GPU.  The simulator's NVML sums
  the processes one by one, so a reading is exact only while nothing moves: the driver
  stops the whole container at random moments and reads NVML then;
- when the chaos stops, the ledger, a fresh process's cuMemGetInfo and NVML agree with
  what the processes really hold, and are 0 once they have exited; the neighbour's
  ledger never changed.

CGPU_CHAOS_SEED sets the seed (printed; random by default), so a failure reproduces.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cgpu.core.ledger import LedgerError, read_ledger
from cgpu.core.native import load

GiB = 1 << 30
MiB = 1 << 20
UUID = "GPU-5eed0000-0000-4000-8000-000000000000"
SLICE = GiB
NEIGHBOUR_SLICE, NEIGHBOUR_HOLDS = 512 * MiB, 256 * MiB
WORKERS = 7
MAX_HELD = 6  # allocations a worker holds at most: 7 workers want ~4 GiB of a 1 GiB slice
FORK_ONE_IN = 1000  # steps per forked child, on average
LOCK_WORD_OFFSET = 24  # struct ledger: magic[8], version, size, ndevices, active, lock
TIMEOUT = 60.0  # for anything that should take a moment: nothing may hang
# The GPU has room for exactly the slice next to the neighbour: the driver refuses an
# allocation only when the container would hold more than its slice.
SIM = {"memory": "16GiB", "other_used": str(16 * GiB - SLICE - NEIGHBOUR_HOLDS)}
OTHER_USED = int(SIM["other_used"])

SAMPLER = """
import sys
import pynvml
pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
print("ready", flush=True)
for _ in sys.stdin:
    used = pynvml.nvmlDeviceGetMemoryInfo(handle).used
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    print(used, *(f"{p.pid}:{p.usedGpuMemory}" for p in procs), flush=True)
"""


@pytest.fixture(scope="session")
def chaos_worker(tmp_path_factory, cc, sim_dir) -> Path:
    exe = tmp_path_factory.mktemp("chaos") / "chaos_worker"
    include = next(
        p
        for p in (os.environ.get("CUDA_HOME", "") + "/include", "/usr/local/cuda/include")
        if Path(p, "cuda.h").is_file()
    )
    src = Path(__file__).resolve().parent / "chaos_worker.c"
    cmd = [cc, "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-I", include]
    subprocess.run(
        [*cmd, str(src), "-o", str(exe), "-L", str(sim_dir), "-l:libcuda.so.1"], check=True
    )
    return exe


def read_line(proc: subprocess.Popen[bytes], timeout: float = TIMEOUT) -> str:
    """One line of the process's output, or a failure after `timeout` seconds."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"pid {proc.pid} printed nothing for {timeout} s"
    return proc.stdout.readline().decode().strip()


@dataclass
class Sample:
    """NVML's view from the host: the device's used bytes and each process's."""

    used: int
    processes: dict[int, int]


class Sampler:
    """A host process (no shim) that reads the simulator's NVML on request."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SAMPLER],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        assert read_line(self.proc) == "ready"

    def sample(self) -> Sample:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"\n")
        self.proc.stdin.flush()
        used, *procs = read_line(self.proc).split()
        pairs = (p.split(":") for p in procs)
        return Sample(int(used), {int(pid): int(u) for pid, u in pairs})

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(TIMEOUT)


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    stderr: Path


@dataclass
class Tally:
    """What the chaos did, and what went wrong, for the report and the asserts."""

    seed: int
    actions: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def count(self, action: str) -> None:
        self.actions[action] = self.actions.get(action, 0) + 1


def group_states(pgids: set[int]) -> dict[int, str]:
    """State letter of every process in the process groups `pgids`."""
    states = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) in pgids:
            states[int(entry)] = fields[0]
    return states


class Container:
    """The container's processes: workers in their own process groups (a worker and the
    child it forks are signalled together)."""

    def __init__(
        self,
        exe: Path,
        env: dict[str, str],
        logs: Path,
        rng: random.Random,
        args: tuple[int, ...] = (MAX_HELD, FORK_ONE_IN),
    ) -> None:
        self.exe, self.env, self.logs, self.rng, self.args = exe, env, logs, rng, args
        self.workers: list[Worker] = []
        self.started = 0

    def spawn(self) -> Worker:
        self.started += 1
        stderr = self.logs / f"worker-{self.started}.err"
        with stderr.open("wb") as err:
            proc = subprocess.Popen(
                [str(self.exe), str(self.rng.getrandbits(63)), *map(str, self.args)],
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                bufsize=0,
                start_new_session=True,
            )
        return Worker(proc, stderr)

    def signal(self, worker: Worker, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.proc.pid, sig)

    def replace(self, index: int) -> None:
        """SIGKILL a worker with its child, and start a new one in its place."""
        old = self.workers[index]
        self.signal(old, signal.SIGKILL)
        old.proc.wait(TIMEOUT)
        self.workers[index] = self.spawn()

    @property
    def pgids(self) -> set[int]:
        return {w.proc.pid for w in self.workers}

    def freeze(self) -> None:
        """Stop every process of the container, and wait until all have stopped."""
        for worker in self.workers:
            self.signal(worker, signal.SIGSTOP)
        deadline = time.monotonic() + TIMEOUT
        while any(s not in "TtZX" for s in group_states(self.pgids).values()):
            assert time.monotonic() < deadline, "the container did not stop"
            time.sleep(0.0005)

    def thaw(self) -> None:
        for worker in self.workers:
            self.signal(worker, signal.SIGCONT)

    def kill_all(self) -> None:
        for worker in self.workers:
            self.signal(worker, signal.SIGKILL)
            worker.proc.wait(TIMEOUT)


def read_loop(ledger: Path, stop: threading.Event, tally: Tally) -> None:
    """Read the ledger all along: never more than the slice, never an error."""
    while not stop.is_set():
        try:
            device = read_ledger(ledger).devices[0]
        except Exception as exc:  # any failure is the finding
            tally.failures.append(f"a reader failed: {exc!r}")
            return
        tally.count("read")
        if device.used > SLICE or device.limit != SLICE:
            tally.failures.append(f"a reader saw {device.used} used of limit {device.limit}")
        time.sleep(0.001)


@pytest.fixture
def neighbour(shim_env, native_build, tmp_path) -> Iterator[tuple[int, Path]]:
    """Another container on the same GPU, holding NEIGHBOUR_HOLDS throughout."""
    ledger_dir = tmp_path / "neighbour"
    ledger_dir.mkdir()
    (ledger_dir / "cgpu.conf").write_text(f"version 1\ndevice {UUID} {NEIGHBOUR_SLICE}\n")
    env = shim_env({"CGPU_LEDGER_DIR": str(ledger_dir), "CGPU_CONTEXT_OVERHEAD": "0"}, **SIM)
    cmd = [native_build / "cuda_probe", "dlsym", "init", "alloc", NEIGHBOUR_HOLDS, "ready", "wait"]
    proc = subprocess.Popen(
        list(map(str, cmd)), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
    )
    try:
        assert [read_line(proc) for _ in range(3)] == ["init 0", "alloc 0", "ready"]
        yield proc.pid, ledger_dir / "cgpu.ledger"
        proc.stdin.close()
        assert proc.wait(TIMEOUT) == 0
    finally:
        proc.kill()
        proc.wait(TIMEOUT)


def tamper(ledger: Path, rng: random.Random, tally: Tally) -> None:
    """What a container may write into its own ledger."""
    _, lib = load()
    field_, value = rng.choice([("used", 0), ("limit", rng.getrandbits(63))])
    assert lib.cgpu_ledger_test_poke(str(ledger).encode(), field_.encode(), 0, 0, value) == 0
    tally.count(f"tamper-{field_}")


def check_frozen(container: Container, sampler: Sampler, neighbour_pid: int, fd: int, tally: Tally):
    """With the whole container stopped, NVML's sum is exact: never more than the slice."""
    container.freeze()
    try:
        sample = sampler.sample()
        ours = sum(u for pid, u in sample.processes.items() if pid != neighbour_pid)
        if ours > SLICE:
            tally.failures.append(f"the container held {ours / MiB:.0f} MiB on the GPU")
        if sample.processes.get(neighbour_pid) != NEIGHBOUR_HOLDS:
            tally.failures.append(f"the neighbour's NVML reading changed: {sample}")
        if sample.used != OTHER_USED + ours + NEIGHBOUR_HOLDS:
            tally.failures.append(f"NVML's device total is not its processes' sum: {sample}")
        tally.count("freeze")
        if int.from_bytes(os.pread(fd, 4, LOCK_WORD_OFFSET), "little"):
            tally.count("frozen-inside-lock")
    finally:
        container.thaw()


def run_chaos(container, sampler, ledger, neighbour_pid, seconds, tally) -> None:
    rng = container.rng
    fd = os.open(ledger, os.O_RDONLY)
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            index = rng.randrange(len(container.workers))
            worker, action = container.workers[index], rng.random()
            if action < 0.55:  # a stop of a few ms: sometimes inside the lock, then on or dead
                container.signal(worker, signal.SIGSTOP)
                time.sleep(rng.uniform(0, 0.005))
                if rng.random() < 0.1:
                    container.replace(index)
                    tally.count("kill-stopped")
                else:
                    container.signal(worker, signal.SIGCONT)
                    tally.count("stop")
            elif action < 0.70:
                check_frozen(container, sampler, neighbour_pid, fd, tally)
            elif action < 0.82:
                container.replace(index)
                tally.count("kill")
            elif action < 0.90:
                tamper(ledger, rng, tally)
            time.sleep(rng.uniform(0, 0.01))
            assert not tally.failures, f"seed {tally.seed}: {tally.failures[:5]}"
    finally:
        os.close(fd)


def stop_and_hold(container: Container) -> dict[int, int]:
    """Ask every worker to stop churning: pid -> the bytes it holds."""
    for worker in container.workers:
        worker.proc.stdin.write(b"hold\n")
        worker.proc.stdin.flush()
    held = {}
    for worker in container.workers:
        line = read_line(worker.proc).split()
        assert line[:1] == ["held"], f"worker {worker.proc.pid}: {line}"
        held[worker.proc.pid] = int(line[1])
    return held


def refused_by_the_shim(logs: Path) -> int:
    return sum(
        path.read_text(errors="replace").count("cgpu: out of GPU memory slice")
        for path in logs.glob("*.err")
    )


def refused_by_the_driver(logs: Path) -> list[str]:
    """Workers' refusals that the shim did not make: the GPU was full, so the container
    held more than its slice (each refusal of the shim writes its line before the
    worker's; a kill between the two leaves one more of the shim's)."""
    found = []
    for path in sorted(logs.glob("*.err")):
        text = path.read_text(errors="replace")
        by_shim = text.count("cgpu: out of GPU memory slice")
        seen = text.count("chaos-worker: refused")
        if seen > by_shim:
            found.append(f"{path.name}: {seen - by_shim} of {seen}")
    return found


def sanitizer_reports(logs: Path) -> list[str]:
    markers = ("AddressSanitizer", "ThreadSanitizer", "LeakSanitizer")
    return [
        f"{path.name}: {path.read_text(errors='replace')[:2000]}"
        for path in sorted(logs.glob("*.err"))
        if any(m in path.read_text(errors="replace") for m in markers)
    ]


def ledger_ready(ledger: Path) -> bool:
    """Whether a worker has created the ledger and added the device (a file caught between
    its creation and its initialisation reads as truncated)."""
    try:
        return ledger.exists() and bool(read_ledger(ledger).devices)
    except LedgerError:
        return False


def test_chaos_never_exceeds_the_slice_and_ends_exact(
    shim_env, sim_env, probe, chaos_worker, ledger_dir, neighbour, tmp_path
):
    seed = int(os.environ.get("CGPU_CHAOS_SEED") or random.randrange(1 << 32))
    seconds = float(os.environ.get("CGPU_CHAOS_SECONDS") or 20)
    print(f"chaos seed {seed} ({seconds} s): CGPU_CHAOS_SEED={seed} reproduces it")
    tally = Tally(seed)
    neighbour_pid, neighbour_ledger = neighbour
    neighbour_before = read_ledger(neighbour_ledger)
    assert neighbour_before.devices[0].used == NEIGHBOUR_HOLDS

    (ledger_dir / "cgpu.conf").write_text(f"version 1\ndevice {UUID} {SLICE}\n")
    ledger = ledger_dir / "cgpu.ledger"
    env = shim_env({"CGPU_CONTEXT_OVERHEAD": "0"}, **SIM)
    logs = tmp_path / "logs"
    logs.mkdir()
    container = Container(chaos_worker, env, logs, random.Random(seed))
    sampler = Sampler(sim_env(**SIM))
    stop = threading.Event()
    reader = threading.Thread(target=read_loop, args=(ledger, stop, tally), daemon=True)
    try:
        container.workers = [container.spawn() for _ in range(WORKERS)]
        deadline = time.monotonic() + TIMEOUT
        while not ledger_ready(ledger):
            assert time.monotonic() < deadline, "no worker opened the ledger"
            time.sleep(0.01)
        reader.start()
        run_chaos(container, sampler, ledger, neighbour_pid, seconds, tally)
        stop.set()
        reader.join(TIMEOUT)
        assert not reader.is_alive(), "a ledger read hung"
        assert not tally.failures, f"seed {seed}: {tally.failures[:5]}"
        print(f"chaos seed {seed}: {tally.actions}, {container.started} workers started")
        assert tally.actions.get("freeze", 0) > 0 and tally.actions.get("kill", 0) > 0
        assert tally.actions.get("read", 0) > 100

        # The chaos is over.  The survivors stop churning and report what they hold.
        held = stop_and_hold(container)
        total = sum(held.values())
        fresh = probe(env, "dlsym", "init", "info", "nvml", timeout=TIMEOUT)
        assert fresh.one("info") == ["0", str(SLICE - total), str(SLICE)], f"seed {seed}"
        assert fresh.one("nvml")[:3] == ["0", str(SLICE), str(total)], f"seed {seed}"
        snap = read_ledger(ledger)
        assert snap.devices[0].used == total, f"seed {seed}: {snap}"
        in_ledger = {p.pid: sum(p.used.values()) for p in snap.processes if p.used}
        assert in_ledger == {pid: b for pid, b in held.items() if b}, f"seed {seed}"
        sample = sampler.sample()
        on_gpu = {pid: u for pid, u in sample.processes.items() if pid != neighbour_pid and u}
        assert on_gpu == in_ledger, f"seed {seed}: NVML {sample}"

        # They exit cleanly: everything comes back.
        for worker in container.workers:
            worker.proc.stdin.close()
            line = read_line(worker.proc).split()
            assert worker.proc.wait(TIMEOUT) == 0, f"worker {worker.proc.pid}: {line}"
            assert line[0] == "freed" and line[2] == "0", line
        snap = read_ledger(ledger)
        assert snap.devices[0].used == 0 and snap.processes == [], f"seed {seed}: {snap}"
        sample = sampler.sample()
        assert sample.used == OTHER_USED + NEIGHBOUR_HOLDS
        assert set(sample.processes) == {neighbour_pid}
        assert read_ledger(neighbour_ledger) == neighbour_before
    finally:
        stop.set()
        container.thaw()
        container.kill_all()
        sampler.close()
    reports = sanitizer_reports(logs)
    assert not reports, "\n".join(reports)
    assert refused_by_the_shim(logs) > 0, "the workers never reached the edge of the slice"
    over = refused_by_the_driver(logs)
    assert not over, f"seed {seed}: the driver refused what the ledger allowed: {over}"


def churn_at_the_edge(env_for, chaos_worker, ledger_dir, logs, fork_one_in, disturb=None):
    """Three workers churn at the edge of a slice on a GPU with room for exactly the slice,
    for 3 s, while `disturb(container)` runs every few ms; then they exit cleanly.  Any
    refusal that the shim did not make shows the container holding more than its slice."""
    (ledger_dir / "cgpu.conf").write_text(f"version 1\ndevice {UUID} {SLICE}\n")
    room = {"memory": "16GiB", "other_used": str(16 * GiB - SLICE)}
    env = env_for({"CGPU_CONTEXT_OVERHEAD": "0"}, **room)
    logs.mkdir()
    container = Container(chaos_worker, env, logs, random.Random(1), (2, fork_one_in, 512))
    try:
        container.workers = [container.spawn() for _ in range(3)]
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            if disturb:
                disturb(container)
            time.sleep(0.005)
        for worker in container.workers:
            worker.proc.stdin.close()
            line = read_line(worker.proc).split()
            assert worker.proc.wait(TIMEOUT) == 0 and line[:3] == ["freed", line[1], "0"], line
        snap = read_ledger(ledger_dir / "cgpu.ledger")
        assert snap.devices[0].used == 0 and snap.processes == [], snap
    finally:
        container.kill_all()
    assert refused_by_the_shim(logs) > 0, "the slice was never full"
    assert not sanitizer_reports(logs)
    over = refused_by_the_driver(logs)
    assert not over, f"the driver refused what the ledger allowed: {over}"


@pytest.mark.parametrize("fork_one_in", [0, 4], ids=["frees", "exits"])
def test_bytes_come_back_only_once_the_driver_freed_them(
    shim_env, chaos_worker, ledger_dir, tmp_path, fork_one_in
):
    """A free was credited before the driver's free ("frees"), and a clean exit gave its
    slot back while the process still held memory ("exits": children that exit without
    freeing): for a moment the container held more than its slice."""
    churn_at_the_edge(shim_env, chaos_worker, ledger_dir, tmp_path / "logs", fork_one_in)


def test_a_killed_process_is_freed_only_once_it_has_exited(
    shim_env, chaos_worker, ledger_dir, tmp_path
):
    """A killed process's slot was freed when its files closed, before it had finished
    exiting and so before the driver had its memory back."""

    def kill_one(container: Container) -> None:
        container.replace(container.rng.randrange(len(container.workers)))

    churn_at_the_edge(shim_env, chaos_worker, ledger_dir, tmp_path / "logs", 0, kill_one)


def test_a_total_zeroed_under_a_charge_does_not_stick(shim_env, chaos_worker, ledger_dir, tmp_path):
    """The total was checked, then read again: a zero written between the two reads was
    taken as the total and stamped valid, and the slice over-committed."""
    _, lib = load()
    path = str(ledger_dir / "cgpu.ledger").encode()

    def zero_used(container: Container) -> None:
        for _ in range(200):
            lib.cgpu_ledger_test_poke(path, b"used", 0, 0, 0)

    churn_at_the_edge(shim_env, chaos_worker, ledger_dir, tmp_path / "logs", 0, zero_used)
