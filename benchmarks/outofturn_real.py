"""Out-of-turn work on a real GPU (issue 34, item 1): the host's view of compute.

    python benchmarks/outofturn_real.py [--seconds 12] [--case offender] [--case beside]
    python benchmarks/outofturn_real.py --sim ...   # the same on the simulator (PyTorch there)

- offender: `fixed` 30 `off`, whose worker launches PyTorch spin kernels through the shim (its
  turns) and, from a second thread, spin kernels of its own PTX straight through libcuda.so.1
  (opened by its absolute path, cuLaunchKernel found with libc's own dlsym: past the shim),
  beside `fixed` 30 `n`. Goals: `off` flagged within 3 s (the arbiter's first out-of-turn charge,
  from its log), charged (the status file's out_of_turn_s), `n` within 30 +- 5 in every 1 s
  window from 3 s.
- beside: `fixed` 30 and `share` 40 that follow the protocol beside an unmanaged saturating
  worker (no container): never flagged nor charged (the status file, every second).

A worker's share is (spin kernels finished in a window x one kernel's time alone) / window, one
kernel's time measured first by a worker alone on the GPU (as compute_share_real.py does).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cgpu.core.config import write_config
from cgpu.core.paths import shim_path, sim_lib_dir

WORKER = r"""
import ctypes, json, os, sys, threading, time, torch
cycles, seconds, start_at = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
raw = sys.argv[4]
torch.cuda.init()
torch.cuda._sleep(cycles); torch.cuda.synchronize()
PTX = b'''.version 7.0
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 ns)
{
  .reg .u64 %t0, %t1, %d, %n;
  .reg .pred %p;
  ld.param.u64 %n, [ns];
  mov.u64 %t0, %globaltimer;
LOOP:
  mov.u64 %t1, %globaltimer;
  sub.u64 %d, %t1, %t0;
  setp.lt.u64 %p, %d, %n;
  @%p bra LOOP;
  ret;
}
'''

def past_the_shim(stop):
    # libc's own dlsym on a handle of the driver opened by its absolute path: the shim's
    # dlsym never sees the lookup, so these are the driver's functions.
    libc = ctypes.CDLL("libc.so.6")
    libc.dlvsym.restype = ctypes.c_void_p
    libc.dlvsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    addr = libc.dlvsym(libc._handle, b"dlsym", b"GLIBC_2.34") or libc.dlvsym(
        libc._handle, b"dlsym", b"GLIBC_2.2.5")
    dlsym = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(addr)
    cuda = ctypes.CDLL(raw)
    def fn(name, *args):
        return ctypes.CFUNCTYPE(ctypes.c_int, *args)(dlsym(cuda._handle, name))
    P, I = ctypes.c_void_p, ctypes.c_uint
    ctx, mod, func, stream = P(), P(), P(), P()
    assert fn(b"cuDevicePrimaryCtxRetain", P, ctypes.c_int)(ctypes.byref(ctx), 0) == 0
    assert fn(b"cuCtxSetCurrent", P)(ctx) == 0
    assert fn(b"cuModuleLoadData", P, ctypes.c_char_p)(ctypes.byref(mod), PTX) == 0
    assert fn(b"cuModuleGetFunction", P, P, ctypes.c_char_p)(ctypes.byref(func), mod, b"spin") == 0
    assert fn(b"cuStreamCreate", P, I)(ctypes.byref(stream), 1) == 0
    launch = fn(b"cuLaunchKernel", P, I, I, I, I, I, I, I, P, P, P)
    sync = fn(b"cuStreamSynchronize", P)
    ns = ctypes.c_uint64(1_000_000)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(ns), ctypes.c_void_p))
    while not stop.is_set():
        for _ in range(8):
            assert launch(func, 1, 1, 1, 1, 1, 1, 0, stream, params, None) == 0
        sync(stream)

while time.time() < start_at:
    time.sleep(0.001)
stop = threading.Event()
if raw != "-":
    threading.Thread(target=past_the_shim, args=(stop,), daemon=True).start()
t0 = time.perf_counter()
windows = [0] * int(seconds)
while True:
    for _ in range(4):
        torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    w = int(time.perf_counter() - t0)
    if w >= len(windows):
        break
    windows[w] += 4
stop.set()
print(json.dumps(windows), flush=True)
"""


def raw_libcuda() -> str:
    """The absolute path of the libcuda.so.1 this process's CUDA loads (the offender opens it)."""
    import torch

    torch.cuda.init()
    for line in Path("/proc/self/maps").read_text().splitlines():
        if line.rstrip().endswith(("libcuda.so.1", "libcuda.so")) or "libcuda.so." in line:
            return os.path.realpath(line.split()[-1])
    raise SystemExit("libcuda.so.1 not found in this process's maps")


class Stand:
    """One case's containers' root, its arbiter and its workers."""

    def __init__(self, tmp: Path, env: dict[str, str], uuid: str, cycles: int) -> None:
        self.tmp, self.env, self.uuid, self.cycles = tmp, env, uuid, cycles
        self.root = tmp / "containers"
        self.root.mkdir(parents=True)
        self.status = tmp / "status.json"
        self.log = tmp / "arbiter.log"
        self.started_at: float | None = None  # when the workers start (time.time())
        self.arbiter = subprocess.Popen(
            [
                sys.executable,
                "-P",
                "-m",
                "cgpu.cli",
                "compute-arbiter",
                "--containers",
                str(self.root),
                "--status",
                str(self.status),
            ],
            env=env,
            stderr=self.log.open("w"),
        )

    def container(self, name: str, percent: int, policy: str) -> dict[str, str]:
        ledger = self.root / name
        ledger.mkdir()
        write_config(ledger, {self.uuid: 8 << 30}, {self.uuid: (percent, policy)})
        deadline = time.monotonic() + 10
        while not (ledger / "compute.sock").exists():
            if time.monotonic() > deadline or self.arbiter.poll() is not None:
                raise SystemExit(self.log.read_text()[-3000:])
            time.sleep(0.05)
        return dict(self.env, LD_PRELOAD=str(shim_path()), CGPU_LEDGER_DIR=str(ledger))

    def run(self, members: list[tuple[str, dict[str, str], str]], seconds: float, watch):
        """Start every worker at one instant; call watch(t0_wall) while they run; return each
        worker's kernels per second."""
        start_at = time.time() + 6.0 + len(members)  # imports, contexts
        procs = [
            (
                name,
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        WORKER,
                        str(self.cycles),
                        str(seconds),
                        str(start_at),
                        raw,
                    ],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
            for name, env, raw in members
        ]
        watch(start_at)
        out = {}
        for name, proc in procs:
            stdout, stderr = proc.communicate(timeout=seconds + 120)
            if proc.returncode != 0:
                raise SystemExit(f"{name} failed ({proc.returncode}):\n{stderr[-3000:]}")
            out[name] = json.loads(stdout.strip().splitlines()[-1])
        return out

    def read_status(self) -> dict:
        try:
            return json.loads(self.status.read_text())
        except (OSError, ValueError):
            return {}

    def close(self) -> None:
        self.arbiter.terminate()
        self.arbiter.wait(timeout=10)


def figures(doc: dict) -> dict[str, dict]:
    """{container name: its figures} from a status document (one GPU)."""
    out = {}
    for gpu in doc.get("gpus", {}).values():
        for path, got in gpu.get("containers", {}).items():
            out[Path(path).name] = got
    return out


def first_charge(log: Path, since: float) -> float | None:
    for line in log.read_text().splitlines():
        if "out-of-turn work" in line and "charged" in line:
            at = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            return at - since
    return None


def report_offender(
    stand: Stand, n: list[float], charged: float, flagged: bool, innocent: bool
) -> bool:
    start = stand.started_at
    flag = first_charge(stand.log, start) if start is not None else None
    near = all(abs(v - 30) <= 5 for v in n[3:])
    in_time = flag is not None and flag <= 3.0
    print(
        f"offender: first charged {'never' if flag is None else f'at {flag:.2f} s'} "
        f"({'ok' if in_time else 'MISSED'}: <= 3 s); out of turn {charged} s "
        f"({'ok' if charged > 0 else 'MISSED'}); flagged seen {flagged}; n never flagged "
        f"{innocent}"
    )
    print(
        f"  n per window: {' '.join(f'{v:.1f}' for v in n)} "
        f"({'ok' if near else 'MISSED'}: 30 +- 5 from 3 s)"
    )
    return in_time and charged > 0 and near and innocent


def case_beside(stand: Stand, bare: dict[str, str], seconds: float) -> bool:
    members = [
        ("fixed30", stand.container("fixed30", 30, "fixed"), "-"),
        ("share40", stand.container("share40", 40, "share"), "-"),
        ("unmanaged", bare, "-"),
    ]
    bad: list[str] = []

    def watch(start_at: float) -> None:
        while time.time() < start_at + seconds:
            time.sleep(1.0)
            for name, got in figures(stand.read_status()).items():
                if got.get("over_compute") or got.get("out_of_turn_s"):
                    bad.append(f"{name}: {got}")

    stand.run(members, seconds, watch)
    last = figures(stand.read_status())
    print(
        f"beside an unmanaged worker: flagged or charged {bad[:2] or 'never'} "
        f"({'MISSED' if bad else 'ok'}: never); host view {json.dumps(last)}"
    )
    return not bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--case", action="append", choices=("offender", "beside"))
    parser.add_argument("--sim", action="store_true", help="on the simulator (1 ms kernels)")
    args = parser.parse_args()
    if args.sim and "CGPU_SIM_STATE" not in os.environ:  # again, with the simulator loaded
        state = Path(tempfile.mkdtemp(prefix="cgpu-outofturn-sim-"), "sim.state")
        sim = dict(
            os.environ,
            LD_LIBRARY_PATH=str(sim_lib_dir()),
            CGPU_SIM_STATE=str(state),
            CGPU_SIM_DEVICES="1",
            CGPU_SIM_MEMORY="16GiB",
            CGPU_SIM_KERNEL_NS="1000000",
            CGPU_SIM_UTIL_ATTRIBUTION="sampled",
        )
        os.execve(sys.executable, [sys.executable, "-P", __file__, *sys.argv[1:]], sim)
    keep = ("CGPU_SIM_",)  # the simulator's own settings, with --sim
    bare = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(keep) or not k.startswith(("CGPU_", "LD_PRELOAD"))
    }
    tmp = Path(tempfile.mkdtemp(prefix="cgpu-outofturn-"))
    raw = raw_libcuda()
    import pynvml
    import torch

    pynvml.nvmlInit()
    uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    clock_khz = torch.cuda.get_device_properties(0).clock_rate or 1_755_000
    cycles = clock_khz  # about 1 ms
    print(f"# {time.strftime('%Y-%m-%d')} {torch.cuda.get_device_name(0)}, driver {raw}")
    ok = True
    alone = Stand(tmp / "alone", bare, uuid, cycles)
    try:
        got = alone.run([("bare", bare, "-")], 4, lambda start_at: None)["bare"]
    finally:
        alone.close()
    per_kernel_s = 1.0 / statistics.median(got[1:])
    for case in args.case or ("offender", "beside"):
        stand = Stand(tmp / case, bare, uuid, cycles)
        try:
            if case == "offender":
                ok &= run_offender(stand, bare, raw, per_kernel_s, args.seconds)
            else:
                ok &= case_beside(stand, bare, args.seconds)
        finally:
            stand.close()
    print("every goal met" if ok else "a goal MISSED")


def run_offender(
    stand: Stand, bare: dict[str, str], raw: str, per_kernel_s: float, seconds: float
) -> bool:
    members = [
        ("off", stand.container("off", 30, "fixed"), raw),
        ("n", stand.container("n", 30, "fixed"), "-"),
    ]
    seen: list[dict] = []

    def watch(start_at: float) -> None:
        stand.started_at = start_at
        while time.time() < start_at + seconds:
            time.sleep(0.5)
            seen.append(figures(stand.read_status()))

    got = stand.run(members, seconds, watch)
    time.sleep(1.5)
    seen.append(figures(stand.read_status()))
    n = [round(100 * k * per_kernel_s, 1) for k in got["n"]]
    charged = max((f.get("off", {}).get("out_of_turn_s", 0) for f in seen), default=0)
    flagged = any(f.get("off", {}).get("over_compute") for f in seen)
    innocent = not any(
        f.get("n", {}).get("over_compute") or f.get("n", {}).get("out_of_turn_s") for f in seen
    )
    return report_offender(stand, n, charged, flagged, innocent)


if __name__ == "__main__":
    main()
