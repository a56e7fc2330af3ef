"""The measurement behind `cgpu.core.context_cost`, run as a program in a child with no shim.

`python -m cgpu.core.context_probe` retains every device's primary context through the driver,
then prints one JSON line: `{"driver": <NVML's driver version>, "costs": {uuid: bytes}}`, the
memory NVML shows this process holding on each device. NVML names host pids; where this process's
pid is not one (a pod without hostPID), a device's only pid that appeared with the contexts is
taken as this process's. A driver call that fails exits non-zero, naming it on stderr.

It imports nothing of cgpu but its (empty) package files: what it measures is a bare context.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from typing import Any

import pynvml


def check(rc: int, what: str) -> None:
    """Exit naming `what` when a driver call returned an error."""
    if rc:
        sys.exit(f"{what} failed: CUresult {rc}")


def procs(handle: Any) -> dict[int, int | None] | None:
    """{pid: used bytes} of the device's compute processes, or None when NVML cannot say."""
    try:
        found = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        return {p.pid: p.usedGpuMemory for p in found}
    except pynvml.NVMLError:
        return None


def text(value: str | bytes) -> str:
    """NVML's strings, which older bindings return as bytes."""
    return value.decode() if isinstance(value, bytes) else value


def uuid_of(cuda: ctypes.CDLL, dev: ctypes.c_int) -> str:
    """The device's UUID as NVML writes it (`GPU-xxxxxxxx-xxxx-...`)."""
    get_uuid = getattr(cuda, "cuDeviceGetUuid_v2", None) or cuda.cuDeviceGetUuid
    raw = (ctypes.c_ubyte * 16)()
    check(get_uuid(raw, dev), "cuDeviceGetUuid")
    h = bytes(raw).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def measure() -> dict[str, object]:
    """Retain one primary context per device; what NVML then shows this process holding."""
    cuda = ctypes.CDLL("libcuda.so.1")
    check(cuda.cuInit(0), "cuInit")
    count = ctypes.c_int()
    check(cuda.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
    pynvml.nvmlInit()
    handles, before = [], []
    for ordinal in range(count.value):
        dev = ctypes.c_int()
        check(cuda.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid_of(cuda, dev))
        except pynvml.NVMLError:
            continue
        before.append(procs(handle) or {})
        ctx = ctypes.c_void_p()
        check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        handles.append(handle)
    costs = {}
    for handle, old in zip(handles, before, strict=True):
        now = procs(handle)
        if not now:
            continue
        new = [pid for pid in now if pid not in old]
        pid = os.getpid() if os.getpid() in now else (new[0] if len(new) == 1 else None)
        if pid is not None and now[pid] is not None:
            costs[text(pynvml.nvmlDeviceGetUUID(handle))] = int(now[pid])
    return {"driver": text(pynvml.nvmlSystemGetDriverVersion()), "costs": costs}


def main() -> int:
    """Print the measurement as one JSON line."""
    print(json.dumps(measure()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
