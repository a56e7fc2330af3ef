"""A process's identity in the ledger: exec keeps the pid and start time, and a pid namespace
reuses pids at once; neither may leave memory counted that nobody holds (issue 18)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cgpu.core.ledger import read_ledger

MiB = 1 << 20


@pytest.fixture(scope="session")
def exec_chain(tmp_path_factory, cc, sim_dir) -> Path:
    exe = tmp_path_factory.mktemp("exec") / "exec_chain"
    include = next(
        p
        for p in (os.environ.get("CUDA_HOME", "") + "/include", "/usr/local/cuda/include")
        if Path(p, "cuda.h").is_file()
    )
    src = Path(__file__).resolve().parent / "exec_chain.c"
    cmd = [cc, "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-I", include]
    subprocess.run(
        [*cmd, str(src), "-o", str(exe), "-L", str(sim_dir), "-l:libcuda.so.1"], check=True
    )
    return exe


def run_until_ready(
    argv: list[str], env: dict[str, str]
) -> tuple[subprocess.Popen[str], list[str]]:
    """Start `argv` and read its lines up to "ready"."""
    pipe = subprocess.PIPE
    proc = subprocess.Popen(argv, env=env, stdin=pipe, stdout=pipe, stderr=pipe, text=True)
    assert proc.stdout is not None
    lines = []
    while (line := proc.stdout.readline().strip()) != "ready":
        assert line, f"exited early: {proc.wait()} {proc.stderr.read() if proc.stderr else ''}"
        lines.append(line)
    return proc, lines


def finish(proc: subprocess.Popen[str]) -> None:
    """Let it exit; it must exit cleanly."""
    proc.communicate("", timeout=30)
    assert proc.returncode == 0


def test_an_exec_chain_counts_only_the_last_image(shim_env, exec_chain, ledger_dir):
    """Six images, each allocating 20 MiB and exec'ing the next: the driver freed each image's
    memory at its exec, so the last one holds 20 MiB, and so does the ledger."""
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB", "CGPU_CONTEXT_OVERHEAD": "0"})
    proc, lines = run_until_ready([str(exec_chain), "6", str(20 * MiB)], env)
    try:
        assert lines == [f"used {20 * MiB}"]
        snap = read_ledger(ledger_dir / "cgpu.ledger")
        assert snap.devices[0].used == 20 * MiB, snap
        assert [sum(p.used.values()) for p in snap.processes] == [20 * MiB], snap
    finally:
        finish(proc)
    assert read_ledger(ledger_dir / "cgpu.ledger").devices[0].used == 0


def test_an_exec_into_an_image_without_the_shim_gives_the_memory_back(
    shim_env, probe, exec_chain, ledger_dir
):
    """The new image never loads the shim, so nothing of ours claims the old slot: the other
    processes of the container must see it freed while the process lives on."""
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB", "CGPU_CONTEXT_OVERHEAD": "0"})
    proc, _ = run_until_ready([str(exec_chain), "plain", str(20 * MiB)], env)
    try:
        seen = probe(env, "dlsym", "init", "alloc", 4 * MiB, "info")
        assert seen.one("info") == ["0", str(1024 * MiB - 4 * MiB), str(1024 * MiB)]
        snap = read_ledger(ledger_dir / "cgpu.ledger")
        assert snap.devices[0].used == 0 and snap.processes == [], snap
    finally:
        finish(proc)


# Runs as pid 1 of a new pid namespace: a holder keeps 200 MiB; a victim takes 50 MiB and is
# SIGKILLed; ns_last_pid makes the next process get the victim's pid, often in the same clock
# tick (the same start time).  Each new process reports what cuMemGetInfo shows used.
IN_NAMESPACE = r"""
import json, os, signal, subprocess, sys
probe, attempts = sys.argv[1], int(sys.argv[2])
MiB = 1 << 20

def start(*commands):
    p = subprocess.Popen([probe, "dlsym", *map(str, commands)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    lines = []
    while (line := p.stdout.readline().strip()) != "ready":
        assert line, f"probe exited: {p.wait()}"
        lines.append(line)
    return p, lines

def start_time(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])

holder, _ = start("init", "alloc", 200 * MiB, "ready", "wait")
results = []
for _ in range(attempts):
    victim, _ = start("init", "alloc", 50 * MiB, "ready", "wait")
    pid, started = victim.pid, start_time(victim.pid)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(pid - 1))
    new, lines = start("init", "info", "ready", "wait")
    same_tick = new.pid == pid and start_time(new.pid) == started
    new.communicate("")
    info = next(line.split() for line in lines if line.startswith("info "))
    results.append({"same_pid": new.pid == pid, "same_tick": same_tick,
                    "used": int(info[3]) - int(info[2])})
holder.communicate("")
print(json.dumps(results))
"""


def test_a_reused_pid_never_sees_the_dead_holders_memory(shim_env, native_build, ledger_dir):
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a pid namespace")
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB", "CGPU_CONTEXT_OVERHEAD": "0"})
    out = subprocess.run(
        [unshare, "--pid", "--fork", "--mount-proc", sys.executable, "-c", IN_NAMESPACE,
         str(native_build / "cuda_probe"), "20"],
        env=env, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    results = json.loads(out.stdout.splitlines()[-1])
    reused = [r for r in results if r["same_pid"]]
    assert reused, f"the pid was never reused: {results}"
    if not os.environ.get("CGPU_TEST_SANITIZER"):  # a sanitizer's start-up outlasts a tick
        assert any(r["same_tick"] for r in reused), f"never the same start time: {results}"
    assert all(r["used"] == 200 * MiB for r in reused), results
