"""Isolation that holds against a hostile container (issue 11) and legacy context teardown.

The container can write its ledger: these tests write into it (through the test-only
`cgpu_ledger_test_poke`, which knows the layout), stop processes inside its lock, truncate it
under readers, and run processes in separate pid namespaces.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from compute_kit import cuda_include

from cgpu.core.ledger import LedgerError, read_ledger
from cgpu.core.native import load

GiB = 1 << 30
MiB = 1 << 20


def start(native_build: Path, env: dict[str, str], *commands: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(native_build / "cuda_probe"), "dlsym", *map(str, commands)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def expect(proc: subprocess.Popen[str], *lines: str) -> None:
    for line in lines:
        got = proc.stdout.readline().strip()
        assert got == line, f"expected {line!r}, got {got!r}; stderr: {proc.stderr.read()}"


def poke(ledger: Path, field: str, value: int, *, slot: int = 0, dev: int = 0) -> None:
    _, lib = load()
    assert lib.cgpu_ledger_test_poke(str(ledger).encode(), field.encode(), slot, dev, value) == 0


def holder(native_build, env, size: int) -> subprocess.Popen[str]:
    """A process of the container that holds `size` bytes and waits for stdin to close."""
    proc = start(native_build, env, "init", "alloc", size, "ready", "wait", "info")
    expect(proc, "init 0", "alloc 0", "ready")
    return proc


def test_a_limit_written_into_the_ledger_is_never_enforced(
    shim_env, probe, native_build, ledger_dir
):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    ledger = ledger_dir / "cgpu.ledger"
    proc = start(native_build, env, "init", "alloc", 512 * MiB, "ready", "wait", "alloc", 768 * MiB)
    expect(proc, "init 0", "alloc 0", "ready")
    poke(ledger, "limit", 1 << 50)
    out, _ = proc.communicate("", timeout=30)
    assert out.split()[-2:] == ["alloc", "2"]  # the running process keeps its own slice
    fresh = probe(env, "dlsym", "init", "info", "alloc", 1536 * MiB)
    assert fresh.one("info")[2] == str(GiB)
    assert fresh.one("alloc") == ["2"]
    # The fresh process also put the file's copy back for readers.
    assert read_ledger(ledger).devices[0].limit == GiB


def test_readers_take_the_limit_from_the_read_only_config(shim_env, probe, ledger_dir):
    uuid = "GPU-5eed0000-0000-4000-8000-000000000000"
    (ledger_dir / "cgpu.conf").write_text(f"version 1\ndevice {uuid} 768MiB\n")
    probe(shim_env(uuids=uuid), "dlsym", "init", "alloc", MiB)
    poke(ledger_dir / "cgpu.ledger", "limit", 1 << 50)
    assert read_ledger(ledger_dir / "cgpu.ledger").devices[0].limit == 768 * MiB


def test_a_zeroed_total_is_recomputed_from_the_slots(shim_env, probe, native_build, ledger_dir):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    ledger = ledger_dir / "cgpu.ledger"
    proc = holder(native_build, env, 768 * MiB)
    poke(ledger, "used", 0)
    # A fresh process recomputes the total when it joins, and is refused what is not left.
    fresh = probe(env, "dlsym", "init", "info", "alloc", 512 * MiB, "alloc", 128 * MiB)
    assert fresh.one("info")[1] == str(256 * MiB)
    assert [line[0] for line in fresh.lines("alloc")] == ["2", "0"]
    assert read_ledger(ledger).devices[0].used == 768 * MiB
    proc.communicate("", timeout=30)


def test_a_process_puts_back_its_own_zeroed_slot(shim_env, native_build, ledger_dir):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    ledger = ledger_dir / "cgpu.ledger"
    proc = start(native_build, env, "init", "alloc", 768 * MiB, "ready", "wait", "alloc", 512 * MiB)
    expect(proc, "init 0", "alloc 0", "ready")
    slot = read_ledger(ledger).processes[0]
    assert list(slot.used.values()) == [768 * MiB]
    poke(ledger, "slot_used", 0, slot=0)
    poke(ledger, "used", 0)
    assert read_ledger(ledger).devices[0].used == 0  # what the hostile write did
    out, _ = proc.communicate("", timeout=30)
    assert out.split()[-2:] == ["alloc", "2"]  # its own record says 768 MiB are held
    assert read_ledger(ledger).devices[0].used == 0  # it exited: all of it came back


def test_views_never_wait_on_a_process_stopped_inside_the_lock(shim_env, native_build, ledger_dir):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    ledger = ledger_dir / "cgpu.ledger"
    proc = start(native_build, env, "init", "alloc", 256 * MiB, "ready", "wait", "info", "nvml")
    expect(proc, "init 0", "alloc 0", "ready")
    # A dead process's slot, so that views want to sweep.
    victim = holder(native_build, env, 128 * MiB)
    victim.kill()
    victim.wait()
    # A process of the container stops while it holds the ledger's lock.
    stopped = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, signal, sys; from cgpu.core.native import load; ffi, lib = load();"
            "assert lib.cgpu_ledger_test_hold_lock(sys.argv[1].encode()) == 0;"
            "print('held', flush=True); os.kill(os.getpid(), signal.SIGSTOP)",
            str(ledger),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert stopped.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        # nvidia-smi in the container: NVML only.
        smi = subprocess.run(
            [str(native_build / "cuda_probe"), "dlsym", "nvml"],
            env=env,
            capture_output=True,
            text=True,
            timeout=20,
        )
        out, _ = proc.communicate("", timeout=20)  # cuMemGetInfo and NVML of a running process
        assert time.monotonic() - t0 < 10
    finally:
        stopped.kill()
        stopped.wait()
    nvml = smi.stdout.split()
    assert nvml[:4] == ["nvml", "0", str(GiB), str(256 * MiB)], smi.stdout + smi.stderr
    lines = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    assert lines["info"][0] == "0"
    assert lines["nvml"][:3] == ["0", str(GiB), str(256 * MiB)]


def test_a_dead_lock_holder_is_taken_over(shim_env, probe, ledger_dir):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"})
    assert probe(env, "dlsym", "init", "alloc", MiB).one("alloc") == ["0"]
    ledger = ledger_dir / "cgpu.ledger"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sys; from cgpu.core.native import load; ffi, lib = load();"
            "assert lib.cgpu_ledger_test_hold_lock(sys.argv[1].encode()) == 0; os._exit(0)",
            str(ledger),
        ],
        check=True,
    )
    r = probe(env, "dlsym", "init", "alloc", 512 * MiB, "alloc", 600 * MiB, timeout=20)
    assert [line[0] for line in r.lines("alloc")] == ["0", "2"]


def _read_loop_script(ledger: Path, rounds: int) -> str:
    return (
        "import sys\n"
        "from cgpu.core.ledger import LedgerError, read_ledger\n"
        "ok = bad = 0\n"
        f"for _ in range({rounds}):\n"
        "    try:\n"
        f"        read_ledger({str(ledger)!r})\n"
        "        ok += 1\n"
        "    except LedgerError:\n"
        "        bad += 1\n"
        "print(ok, bad)\n"
    )


def test_readers_survive_a_ledger_truncated_under_them(shim_env, probe, ledger_dir):
    probe(shim_env({"CGPU_MEM_LIMIT": "1GiB"}), "dlsym", "init", "alloc", MiB)
    ledger = ledger_dir / "cgpu.ledger"
    good = ledger.read_bytes()
    reader = subprocess.Popen(
        [sys.executable, "-c", _read_loop_script(ledger, 3000)], stdout=subprocess.PIPE, text=True
    )
    with ledger.open("r+b") as f:
        while reader.poll() is None:
            for size in (0, 10, 100, 4096, len(good) - 8):
                f.truncate(size)
            f.seek(0)
            f.write(good)
            f.flush()
    out, _ = reader.communicate(timeout=60)
    assert reader.returncode == 0, f"the reader died: {reader.returncode}"
    ok, bad = map(int, out.split())
    assert ok + bad == 3000 and bad > 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("uuid", int.from_bytes(b"GPU-\x01\x02\n\x7f", "little")),  # not printable
        ("ndevices", 1000),
        ("in_use", 7),
    ],
)
def test_readers_refuse_garbage_with_an_error_code(shim_env, probe, ledger_dir, field, value):
    probe(shim_env({"CGPU_MEM_LIMIT": "1GiB"}), "dlsym", "init", "alloc", MiB)
    ledger = ledger_dir / "cgpu.ledger"
    poke(ledger, field, value)
    with pytest.raises(LedgerError) as err:
        read_ledger(ledger)
    assert err.value.code == -5


def test_readers_refuse_an_unterminated_uuid(shim_env, probe, ledger_dir):
    probe(shim_env({"CGPU_MEM_LIMIT": "1GiB"}), "dlsym", "init", "alloc", MiB)
    ledger = ledger_dir / "cgpu.ledger"
    data = bytearray(ledger.read_bytes())
    at = data.index(b"GPU-5eed")
    data[at : at + 96] = b"A" * 96  # printable, but never terminated
    ledger.write_bytes(bytes(data))
    with pytest.raises(LedgerError) as err:
        read_ledger(ledger)
    assert err.value.code == -5


def test_readers_survive_random_bytes(tmp_path):
    rng = random.Random(7)
    path = tmp_path / "cgpu.ledger"
    header = b"CGPULDG1" + (2).to_bytes(4, "little")
    for _ in range(200):
        size = rng.choice([0, 8, 16, 100, 40000, 60000])
        body = bytes(rng.getrandbits(8) for _ in range(size))
        path.write_bytes(header + body if rng.random() < 0.7 else body)
        try:
            read_ledger(path)
        except LedgerError as exc:
            assert exc.code in (-1, -2, -3, -4, -5)


def test_snapshots_are_consistent_while_two_processes_trade_the_slice(
    shim_env, native_build, ledger_dir
):
    """Two processes take turns holding 640 MiB of a 1 GiB slice; no reader ever sees more."""
    # Pinned overhead: the two start together, so one's calibration window could see the other's
    # 640 MiB and charge it again as overhead (docs/architecture.md, honest accounting).
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB", "CGPU_CONTEXT_OVERHEAD": "0"})
    ledger = ledger_dir / "cgpu.ledger"
    loops = [start(native_build, env, "init", "loop", 0, 640 * MiB) for _ in range(2)]
    try:
        for proc in loops:
            expect(proc, "init 0")
        seen, busy = 0, 0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            snap = read_ledger(ledger)
            used = snap.devices[0].used
            assert used <= GiB, f"a reader saw {used / MiB:.0f} MiB of a 1024 MiB slice"
            assert all(sum(p.used.values()) <= 640 * MiB for p in snap.processes)
            seen += 1
            busy += used > 0
        assert seen > 100 and busy > 0
    finally:
        for proc in loops:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_processes_in_separate_pid_namespaces_never_share_the_lock(
    shim_env, native_build, ledger_dir
):
    """Each process is pid 1 of its own pid namespace, so their thread ids collide (a robust
    mutex would let both in at once): the total they churn concurrently still ends at 0."""
    if subprocess.run(["unshare", "-pf", "true"], capture_output=True).returncode != 0:
        pytest.skip("unprivileged: cannot create pid namespaces here")
    # Pinned overhead: the two start together, so a calibration window could see the other's
    # allocations (a documented limit of the NVML-delta calibration, not what this test is about).
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB", "CGPU_CONTEXT_OVERHEAD": "0"})
    cmd = [
        native_build / "cuda_probe",
        "dlsym",
        "init",
        "threads",
        8,
        4000,
        MiB,
        "ready",
        "wait",
        "info",
    ]
    procs = [
        subprocess.Popen(
            ["unshare", "-pf", *map(str, cmd)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for proc in procs:
        expect(proc, "init 0", "threads 0", "ready")
    snap = read_ledger(ledger_dir / "cgpu.ledger")
    assert snap.devices[0].used == 0 and len(snap.processes) == 2
    assert {p.pid for p in snap.processes} == {1}  # the same pid, in two namespaces
    for proc in procs:
        out, _ = proc.communicate("", timeout=60)
        # The running total (what cuMemGetInfo reads) lost no update either.
        assert out.split()[-3:-1] == ["0", str(GiB)], out


def build_against_sim(tmp_path_factory, cc, sim_dir, name: str) -> Path:
    """tests/shim/<name>.c, built against the simulator's libcuda."""
    exe = tmp_path_factory.mktemp(name) / name
    include = cuda_include()
    src = Path(__file__).resolve().parent / f"{name}.c"
    subprocess.run(
        [
            cc,
            "-std=gnu11",
            "-Wall",
            "-Wno-deprecated-declarations",
            "-I",
            include,
            str(src),
            "-o",
            str(exe),
            "-L",
            str(sim_dir),
            "-l:libcuda.so.1",
        ],
        check=True,
    )
    return exe


def run_steps(exe: Path, size: int, env: dict[str, str]) -> dict[str, list[str]]:
    """Run a context program with `size`: each line it prints, "<step> <fields>...", by step."""
    proc = subprocess.run(
        [str(exe), str(size)], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines()}


@pytest.fixture(scope="session")
def legacy_ctx(tmp_path_factory, cc, sim_dir) -> Path:
    return build_against_sim(tmp_path_factory, cc, sim_dir, "legacy_ctx")


@pytest.fixture(scope="session")
def ctx_owners(tmp_path_factory, cc, sim_dir) -> Path:
    return build_against_sim(tmp_path_factory, cc, sim_dir, "ctx_owners")


def test_memory_of_a_detached_context_comes_back(shim_env, legacy_ctx):
    steps = run_steps(legacy_ctx, 256 * MiB, shim_env({"CGPU_MEM_LIMIT": "1GiB"}))
    start_free = int(steps["start"][1])
    assert steps["alloc"] == ["0", str(start_free - 256 * MiB)]
    assert steps["attach"] == ["0", str(start_free - 256 * MiB)]
    assert steps["detach1"] == ["0", str(start_free - 256 * MiB)]  # still attached once
    assert steps["detach2"] == ["0", str(start_free)]  # destroyed: its memory is back


def test_memory_is_credited_with_the_context_it_was_allocated_in(shim_env, ctx_owners):
    """The shim learns an allocation's context from the driver only before a context may die
    (not at the allocation): with two live contexts, each one's death credits its own memory
    and only that, a release that leaves the primary alive credits nothing, and memory
    allocated after such a release is still credited with the primary."""
    steps = run_steps(ctx_owners, 16 * MiB, shim_env({"CGPU_MEM_LIMIT": "1GiB"}))
    free = int(steps["start"][1])
    a, b, e, f = 8 * 16 * MiB, 4 * 16 * MiB, 2 * 16 * MiB, 16 * MiB
    assert steps["alloc"] == ["0", str(free - a - b - e)]
    assert steps["release1"] == ["0", str(free - a - b - e)]  # retained once more: alive
    assert steps["alloc2"] == ["0", str(free - a - b - e - f)]
    assert steps["destroy"] == ["0", str(free - a - e - f)]  # B only, with its context
    assert steps["release2"] == ["0", str(free)]  # A, E and F with the primary
