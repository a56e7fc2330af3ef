"""NVIDIA's own nvidia-smi (Debian's package, pinned in requirements.txt) on the simulated NVML.

Under `cgpu run --gpu-mem 4GiB` it must show the slice: total = 4096 MiB, used = what the
container's processes hold. Without the shim it shows the whole simulated GPU.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = Path(__file__).with_name("requirements.txt")
MiB = 1 << 20
UUID = "GPU-0a1b2c3d-0000-4000-8000-00000000abcd"
NAME = "cgpu Test H100"
RELEASE = "535.261.03"  # the release of the pinned nvidia-smi
CUDA = "12020"  # the CUDA version the 535 branch reports
QUERY = "--query-gpu=memory.total,memory.used,memory.free,name,uuid"
# The slots of nvmlInternalGetExportTable that the simulator answers (native/sim/nvml_export.c).
ANSWERED_SLOTS = {26, 81, 213, 214, 215}
SMI_TABLE_ID = "6c3efec4-8fc9-4e6c-a327-ee696e12f7c4"


def _pinned_version() -> str:
    for line in REQUIREMENTS.read_text().splitlines():
        m = re.fullmatch(r"deb:\s*nvidia-smi=(\S+)", line.strip())
        if m:
            return m.group(1)
    raise AssertionError(f"no 'deb: nvidia-smi=<version>' line in {REQUIREMENTS}")


@pytest.fixture(scope="module")
def smi() -> Path:
    """The unpacked nvidia-smi binary (scripts/install-nvidia-smi.sh puts it there)."""
    path = REPO / "build" / "nvidia-smi" / _pinned_version() / "nvidia-smi"
    if not path.is_file():
        pytest.fail(f"{path} is missing: run scripts/install-nvidia-smi.sh (scripts/setup.sh does)")
    return path


@pytest.fixture
def env(sim_env: Callable[..., dict[str, str]]) -> dict[str, str]:
    """A 16 GiB simulated GPU reporting the release of the pinned nvidia-smi."""
    return sim_env(memory="16GiB", uuids=UUID, name=NAME, driver_release=RELEASE,
                   driver_version=CUDA)  # fmt: skip


def run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


def cgpu_run(
    state_dir: Path, env: dict[str, str], *command: str
) -> subprocess.CompletedProcess[str]:
    """`cgpu run --simulate --gpu-mem 4GiB -- COMMAND`."""
    return run([sys.executable, "-m", "cgpu.cli", "run", "--simulate", "--gpu-mem", "4GiB",
                "--state-dir", str(state_dir), "--", *command], env)  # fmt: skip


def memory_row(table: str) -> tuple[int, int]:
    """(used, total) MiB of the default table's one GPU."""
    rows = re.findall(r"\|\s+(\d+)MiB /\s+(\d+)MiB \|", table)
    assert len(rows) == 1, table
    return int(rows[0][0]), int(rows[0][1])


def fb_memory(query: str) -> dict[str, int]:
    """`-q`'s FB Memory Usage block, in MiB."""
    block = query.split("FB Memory Usage", 1)[1].split("BAR1 Memory Usage", 1)[0]
    return {k: int(v) for k, v in re.findall(r"(\w+)\s+: (\d+) MiB", block)}


def csv_row(out: str) -> list[str]:
    lines = out.strip().splitlines()
    assert lines[0] == "memory.total [MiB], memory.used [MiB], memory.free [MiB], name, uuid", out
    assert len(lines) == 2, out
    return [field.strip() for field in lines[1].split(",")]


def test_every_command_shows_the_slice_under_cgpu_run(smi, env, state_dir):
    script = f"""
import json, subprocess
smi = {str(smi)!r}
cmds = {{"table": [smi], "list": [smi, "-L"], "query": [smi, "-q"],
        "csv": [smi, {QUERY!r}, "--format=csv"]}}
print(json.dumps({{k: subprocess.run(c, capture_output=True, text=True).stdout
                  for k, c in cmds.items()}}))
"""
    done = cgpu_run(state_dir, env, sys.executable, "-c", script)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert f"Driver Version: {RELEASE}" in out["table"] and "CUDA Version: 12.2" in out["table"]
    assert memory_row(out["table"]) == (0, 4096)
    assert out["list"].strip() == f"GPU 0: {NAME} (UUID: {UUID})"
    assert fb_memory(out["query"]) == {"Total": 4096, "Reserved": 0, "Used": 0, "Free": 4096}
    assert csv_row(out["csv"]) == ["4096 MiB", "0 MiB", "4096 MiB", NAME, UUID]


def test_without_the_shim_the_whole_gpu_shows(smi, sim_env):
    env = sim_env(memory="16GiB", other_used="1GiB", uuids=UUID, name=NAME,
                  driver_release=RELEASE, driver_version=CUDA)  # fmt: skip
    table = run([str(smi)], env)
    assert table.returncode == 0, table.stdout + table.stderr
    assert memory_row(table.stdout) == (1024, 16384)
    query = run([str(smi), "-q"], env).stdout
    assert fb_memory(query) == {"Total": 16384, "Reserved": 0, "Used": 1024, "Free": 15360}
    csv = run([str(smi), QUERY, "--format=csv"], env).stdout
    assert csv_row(csv) == ["16384 MiB", "1024 MiB", "15360 MiB", NAME, UUID]


def test_used_is_what_the_containers_process_holds(smi, env, state_dir, native_build):
    """A process of the same `cgpu run` holds 1000 MiB; nvidia-smi shows it in the slice."""
    probe = native_build / "cuda_probe"
    script = f"""
import json, subprocess
smi = {str(smi)!r}
holder = subprocess.Popen([{str(probe)!r}, "dlsym", "init", "alloc", "{1000 * MiB}", "ready",
                           "wait"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
started = [holder.stdout.readline().strip() for _ in range(3)]
cmds = {{"table": [smi], "query": [smi, "-q"], "csv": [smi, {QUERY!r}, "--format=csv"]}}
out = {{k: subprocess.run(c, capture_output=True, text=True).stdout for k, c in cmds.items()}}
holder.stdin.close()
holder.wait()
print(json.dumps({{"started": started, "pid": holder.pid, **out}}))
"""
    done = cgpu_run(state_dir, env, sys.executable, "-c", script)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["started"] == ["init 0", "alloc 0", "ready"]
    assert memory_row(out["table"]) == (1000, 4096)
    assert fb_memory(out["query"]) == {"Total": 4096, "Reserved": 0, "Used": 1000, "Free": 3096}
    assert csv_row(out["csv"]) == ["4096 MiB", "1000 MiB", "3096 MiB", NAME, UUID]
    # The process list comes through the private table (slot 213): the holder, by pid and name.
    row = re.search(rf"\|\s+0\s+N/A\s+N/A\s+{out['pid']}\s+C\s+(\S+)\s+(\d+)MiB \|", out["table"])
    assert row, out["table"]
    assert row.group(1).endswith("cuda_probe") and int(row.group(2)) == 1000
    assert f"Process ID                        : {out['pid']}" in out["query"]


def test_a_release_mismatch_gives_nvidia_smis_own_error(smi, sim_env):
    """Releases whose private table the simulator does not know: the 535 nvidia-smi refuses."""
    for release in ("550.54.15", "470.256.02"):
        done = run([str(smi), "-L"], sim_env(driver_release=release))
        assert done.returncode != 0
        assert "Mismatch in versions between nvidia-smi and NVML" in done.stdout + done.stderr


def test_the_default_release_follows_the_cuda_version(smi, sim_env):
    """Unset, the release is that of NVIDIA's toolkit for the CUDA version (13.0: 580.65.06)."""
    for cuda, release, cuda_shown in ((None, "580.65.06", "13.0"), ("12020", "535.54.03", "12.2")):
        env = sim_env() if cuda is None else sim_env(driver_version=cuda)
        done = run([str(smi)], env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert re.search(rf"Driver Version: {release}\s+CUDA Version: {cuda_shown}", done.stdout)


def test_a_malformed_release_names_the_variable(smi, sim_env):
    done = run([str(smi), "-L"], sim_env(driver_release="535.x"))
    assert done.returncode != 0
    assert "CGPU_SIM_DRIVER_RELEASE" in done.stderr and "535.x" in done.stderr


EXPORT_PROBE = """
import ctypes, json, sys, uuid
nvml = ctypes.CDLL(sys.argv[1])
assert nvml.nvmlInit_v2() == 0

def table_for(text):
    table = ctypes.POINTER(ctypes.c_void_p)()
    rc = nvml.nvmlInternalGetExportTable(ctypes.byref(table), uuid.UUID(text).bytes_le)
    return rc, table

rc, table = table_for(sys.argv[2])
slot = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
# Every slot called with null pointers: the debug log (26) takes anything (0), the other
# answered slots refuse the arguments (2), any other slot is not supported (3).
answers = {i: slot(table[i])(None, None, None) for i in range(1, table[0] // 8)}
handle, mine = ctypes.c_void_p(), ctypes.c_void_p()
assert slot(table[81])(0, ctypes.cast(ctypes.byref(handle), ctypes.c_void_p).value, 0x22) == 0
assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(mine)) == 0
count = ctypes.c_uint(0)
procs = slot(table[213])(handle, ctypes.cast(ctypes.byref(count), ctypes.c_void_p).value, None)
print(json.dumps({"rc": rc, "size": table[0], "answers": answers,
                  "handle_matches": handle.value == mine.value, "procs": [procs, count.value],
                  "other_id": table_for("00000000-1111-2222-3333-444444444444")[0]}))
"""


def test_the_private_table_answers_its_known_slots_only(sim_env, sim_dir):
    lib = str(sim_dir / "libnvidia-ml.so.1")
    env = sim_env(driver_release=RELEASE)
    done = run([sys.executable, "-c", EXPORT_PROBE, lib, SMI_TABLE_ID], env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["rc"] == 0 and out["size"] == 256 * 8
    answered = {int(i) for i, rc in out["answers"].items() if rc != 3}
    assert answered == ANSWERED_SLOTS
    assert out["answers"]["26"] == 0
    assert all(out["answers"][str(i)] == 2 for i in ANSWERED_SLOTS - {26})
    assert out["handle_matches"]
    assert out["procs"] == [0, 0]  # no process on the GPU: success, an empty list
    assert out["other_id"] == 3  # an unknown table id is not supported


def test_a_plain_cgpu_run_lists_a_pytorch_holder(smi, tmp_path):
    """As a user runs it (no simulator variables): the slice's PyTorch process is in the list.

    `cgpu run` gives the simulated GPU one state file for all its processes, as one real GPU
    has; without it, each process had a GPU of its own and nvidia-smi listed none.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("CGPU_")}
    script = f"""
import json, subprocess, sys
holder = subprocess.Popen([sys.executable, {str(REPO / "examples" / "torch_hold.py")!r},
                           "--mib", "1024"], stdout=subprocess.PIPE, text=True)
ready = holder.stdout.readline().strip()
env = dict(CGPU_SIM_DRIVER_RELEASE={RELEASE!r}, CGPU_SIM_DRIVER_VERSION={CUDA!r})
table = subprocess.run([{str(smi)!r}], capture_output=True, text=True,
                       env={{**__import__("os").environ, **env}}).stdout
holder.kill()
holder.wait()
print(json.dumps({{"ready": ready, "pid": holder.pid, "table": table}}))
"""
    done = run([sys.executable, "-m", "cgpu.cli", "run", "--gpu-mem", "4GiB", "--state-dir",
                str(tmp_path / "state"), "--", sys.executable, "-c", script], env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["ready"].startswith("ready"), out
    row = re.search(rf"\|\s+0\s+N/A\s+N/A\s+{out['pid']}\s+C\s+\S+\s+(\d+)MiB \|", out["table"])
    assert row, out["table"]
    assert int(row.group(1)) >= 1024
    assert memory_row(out["table"])[0] >= 1024
