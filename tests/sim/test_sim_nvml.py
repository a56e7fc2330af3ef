"""The simulated NVML through pynvml: devices, memory, processes across processes, XID events."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from simkit import GiB, MiB, run_py, sim_environ

NVML_BASICS = """
    import pynvml as N
    try:
        N.nvmlDeviceGetCount()
    except N.NVMLError_Uninitialized:
        print("uninit ok")
    N.nvmlInit()
    n = N.nvmlDeviceGetCount()
    out = {"count": n, "driver": str(N.nvmlSystemGetDriverVersion()),
           "cuda": N.nvmlSystemGetCudaDriverVersion(), "devs": []}
    def text(v):
        return v.decode() if isinstance(v, bytes) else v
    for i in range(n):
        h = N.nvmlDeviceGetHandleByIndex(i)
        uuid = N.nvmlDeviceGetUUID(h)
        pci = N.nvmlDeviceGetPciInfo(h)
        assert N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByUUID(uuid)) == i
        assert N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByPciBusId(pci.busId)) == i
        m1 = N.nvmlDeviceGetMemoryInfo(h)
        m2 = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
        u = N.nvmlDeviceGetUtilizationRates(h)
        out["devs"].append({
            "uuid": text(uuid), "name": text(N.nvmlDeviceGetName(h)),
            "minor": N.nvmlDeviceGetMinorNumber(h),
            "serial": N.nvmlDeviceGetSerial(h), "busId": text(pci.busId),
            "legacy": text(pci.busIdLegacy),
            "total": m1.total, "used": m1.used, "free": m1.free,
            "v2": [m2.total, m2.reserved, m2.used, m2.free],
            "cc": list(N.nvmlDeviceGetCudaComputeCapability(h)), "util": [u.gpu, u.memory],
            "temp": N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU),
            "power": N.nvmlDeviceGetPowerUsage(h),
            "procs": len(N.nvmlDeviceGetComputeRunningProcesses(h)),
            "events": N.nvmlDeviceGetSupportedEventTypes(h)})
    try:
        N.nvmlDeviceGetHandleByIndex(n)
    except N.NVMLError_InvalidArgument:
        out["bad_index"] = True
    try:
        N.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    except N.NVMLError_NotFound:
        out["bad_uuid"] = True
    N.nvmlShutdown()
    try:
        N.nvmlDeviceGetCount()
    except N.NVMLError_Uninitialized:
        out["after_shutdown"] = True
    import json
    print(json.dumps(out))
"""


def test_nvml_through_pynvml(simlib: Path, pynvml_ok) -> None:
    proc = run_py(simlib, NVML_BASICS, devices=2, memory="8GiB,16GiB", other_used="1GiB,0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("uninit ok")
    r = json.loads(proc.stdout.splitlines()[-1])
    assert r["count"] == 2 and r["driver"] == "580.65.06" and r["cuda"] == 13000
    assert r["bad_index"] and r["bad_uuid"] and r["after_shutdown"]
    d0, d1 = r["devs"]
    assert d0["uuid"] == "GPU-5eed0000-0000-4000-8000-000000000000"
    assert d0["name"] == "cgpu Simulated GPU" and d0["minor"] == 0 and d1["minor"] == 1
    assert d0["busId"] == "00000000:18:00.0" and d0["legacy"] == "0000:18:00.0"
    assert (d0["total"], d0["used"], d0["free"]) == (8 * GiB, GiB, 7 * GiB)
    assert d0["v2"] == [8 * GiB, 0, GiB, 7 * GiB]
    assert (d1["total"], d1["used"]) == (16 * GiB, 0)
    assert d0["cc"] == [9, 0] and d0["procs"] == 0 and d0["events"] & 0x8
    assert d0["serial"] != d1["serial"]


def test_nvml_memory_v2_version_check(simlib: Path, pynvml_ok) -> None:
    proc = run_py(
        simlib,
        """
        import pynvml as N
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        try:
            N.nvmlDeviceGetMemoryInfo(h, version=1)
        except N.NVMLError_ArgumentVersionMismatch:
            print("mismatch")
    """,
    )
    assert proc.stdout.strip() == "mismatch", proc.stderr


def test_cross_process_usage_via_state_file(
    probe: Path, simlib: Path, tmp_path: Path, pynvml_ok
) -> None:
    state = tmp_path / "sim.state"
    env = sim_environ(simlib, state=state, memory="4GiB", ctx_overhead="100MiB")
    holders = []
    try:
        for size in (300 * MiB, 1 * GiB):
            p = subprocess.Popen(
                [str(probe), "hold", str(size)],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            rc, free = p.stdout.readline().split()
            assert rc == "0"
            holders.append((p, int(free)))
        # The second process saw the first one's memory.
        assert holders[0][1] == 4 * GiB - 100 * MiB - 300 * MiB
        assert holders[1][1] == holders[0][1] - 100 * MiB - 1 * GiB
        code = """
            import json, pynvml as N
            N.nvmlInit()
            h = N.nvmlDeviceGetHandleByIndex(0)
            m = N.nvmlDeviceGetMemoryInfo(h)
            ps = {p.pid: p.usedGpuMemory for p in N.nvmlDeviceGetComputeRunningProcesses(h)}
            ps2 = {p.pid: p.usedGpuMemory for p in N.nvmlDeviceGetComputeRunningProcesses_v2(h)}
            ps3 = {p.pid: p.usedGpuMemory for p in N.nvmlDeviceGetComputeRunningProcesses_v3(h)}
            assert ps == ps2 == ps3
            # No graphics clients and no MPS server on the simulator.
            assert N.nvmlDeviceGetGraphicsRunningProcesses(h) == []
            assert N.nvmlDeviceGetGraphicsRunningProcesses_v3(h) == []
            assert N.nvmlDeviceGetMPSComputeRunningProcesses_v3(h) == []
            print(json.dumps({"used": m.used, "procs": {str(k): v for k, v in ps.items()}}))
        """
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=env,
            text=True,
            capture_output=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        r = json.loads(proc.stdout)
        assert r["used"] == 2 * 100 * MiB + 300 * MiB + GiB
        assert r["procs"] == {
            str(holders[0][0].pid): 400 * MiB,
            str(holders[1][0].pid): 100 * MiB + GiB,
        }
        # A killed process's memory returns at once.
        holders[1][0].send_signal(signal.SIGKILL)
        holders[1][0].wait()
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=env,
            text=True,
            capture_output=True,
            timeout=60,
        )
        r = json.loads(proc.stdout)
        assert r["used"] == 400 * MiB and list(r["procs"]) == [str(holders[0][0].pid)]
        # A newcomer that would not fit gets CUDA_ERROR_OUT_OF_MEMORY.
        p = subprocess.run(
            [str(probe), "hold", str(4 * GiB - 500 * MiB + 1)],
            env=env,
            input="",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert p.stdout.split()[0] == "2"
    finally:
        for p, _ in holders:
            if p.poll() is None:
                p.stdin.close()
                p.wait(timeout=10)


def test_xid_fault_injection(simlib: Path, tmp_path: Path, pynvml_ok) -> None:
    faults = tmp_path / "faults"
    faults.write_text("0 13\n")  # before registration: not delivered
    code = f"""
        import json, time, pynvml as N
        N.nvmlInit()
        h0, h1 = N.nvmlDeviceGetHandleByIndex(0), N.nvmlDeviceGetHandleByIndex(1)
        s = N.nvmlEventSetCreate()
        N.nvmlDeviceRegisterEvents(h0, N.nvmlEventTypeXidCriticalError, s)
        N.nvmlDeviceRegisterEvents(h1, N.nvmlEventTypeXidCriticalError, s)
        out = []
        try:
            N.nvmlEventSetWait(s, 50)
        except N.NVMLError_Timeout:
            out.append("timeout")
        with open({str(faults)!r}, "a") as f:
            f.write("1 79\\nGPU-5eed0000-0000-4000-8000-000000000000 48\\n# note\\n9 1\\n0 6")
        for _ in range(2):
            e = N.nvmlEventSetWait(s, 2000)
            assert e.eventType == N.nvmlEventTypeXidCriticalError
            out.append([N.nvmlDeviceGetIndex(e.device), e.eventData])
        try:
            N.nvmlEventSetWait(s, 50)                 # "0 6" has no newline yet
        except N.NVMLError_Timeout:
            out.append("partial")
        with open({str(faults)!r}, "a") as f:
            f.write("3\\n")
        e = N.nvmlEventSetWait(s, 2000)
        out.append([N.nvmlDeviceGetIndex(e.device), e.eventData])
        N.nvmlEventSetFree(s)
        print(json.dumps(out))
    """
    t0 = time.monotonic()
    proc = run_py(simlib, code, devices=2, faults=faults)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["timeout", [1, 79], [0, 48], "partial", [0, 63]]
    assert time.monotonic() - t0 < 10


def test_nvml_status_readings(simlib: Path, pynvml_ok) -> None:
    """What nvidia-smi, gpustat and nvitop show for a healthy, idle data-centre GPU."""
    code = """
        import json, pynvml as N
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        out = {
            "limit": N.nvmlDeviceGetPowerManagementLimit(h),
            "enforced": N.nvmlDeviceGetEnforcedPowerLimit(h),
            "constraints": list(N.nvmlDeviceGetPowerManagementLimitConstraints(h)),
            "pstate": N.nvmlDeviceGetPerformanceState(h),
            "persistence": N.nvmlDeviceGetPersistenceMode(h),
            "compute_mode": N.nvmlDeviceGetComputeMode(h),
            "display": [N.nvmlDeviceGetDisplayMode(h), N.nvmlDeviceGetDisplayActive(h)],
            "ecc": list(N.nvmlDeviceGetEccMode(h)),
            "ecc_errors": N.nvmlDeviceGetTotalEccErrors(h, 1, 1),
            "temp": N.nvmlDeviceGetTemperatureV(h, N.NVML_TEMPERATURE_GPU),
            "encoder": list(N.nvmlDeviceGetEncoderUtilization(h)),
            "decoder": list(N.nvmlDeviceGetDecoderUtilization(h)),
        }
        try:
            N.nvmlDeviceGetFanSpeed(h)
        except N.NVMLError_NotSupported:
            out["fan"] = "not supported"
        print(json.dumps(out))
    """
    proc = run_py(simlib, code)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "limit": 700000,
        "enforced": 700000,
        "constraints": [200000, 700000],
        "pstate": 0,
        "persistence": 1,
        "compute_mode": 0,
        "display": [0, 0],
        "ecc": [1, 1],
        "ecc_errors": 0,
        "temp": 40,
        "encoder": [0, 167000],
        "decoder": [0, 167000],
        "fan": "not supported",
    }
