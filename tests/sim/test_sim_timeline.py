"""Kernels on the simulator's shared timeline: durations, serialization across processes,
stream and event semantics, queue depth, NVML utilization and launch cost."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from simkit import json_out, run_py, sim_environ

MS = 1_000_000


def test_stream_event_and_sync_semantics(run_timeline) -> None:
    assert run_timeline("semantics").stdout.strip() == "ok"


def test_every_launch_path_takes_its_duration(run_timeline) -> None:
    # No time slice: one process queues all its launches at once.
    assert json_out(run_timeline("paths", timeslice_ns=0))["other_ms"] < 5  # 0 ns by default
    other = json_out(run_timeline("paths", timeslice_ns=0, kernel_ns=2 * MS))["other_ms"]
    assert 20 <= other < 40  # ten kernels of CGPU_SIM_KERNEL_NS each


def test_stream_wait_event_orders_across_devices(run_timeline) -> None:
    assert run_timeline("crossdev", devices=2).stdout.strip() == "ok"


def test_bad_timeline_settings_fail_cuinit(run_timeline) -> None:
    for key, value in (
        ("kernel_ns", "fast"),
        ("kernel_ns", 11_000 * MS),
        ("queue_depth", 0),
        ("timeslice_ns", -1),
        ("slice_ns", 999),
        ("switch_ns", -1),
    ):
        proc = run_timeline("paths", check=False, **{key: value})
        assert proc.returncode != 0
        assert f"CGPU_SIM_{key.upper()}" in proc.stderr


def test_a_full_queue_blocks_the_launcher(run_timeline) -> None:
    r = json_out(run_timeline("queue", queue_depth=4, timeslice_ns=0))
    assert r["four_ms"] < 10  # four pending launches return at once
    assert 45 <= r["five_ms"] < 80  # the fifth waits for the first 50 ms kernel


def _start(exe: Path, simlib: Path, *args: object, **sim: object) -> subprocess.Popen:
    return subprocess.Popen(
        [str(exe), *map(str, args)],
        env=sim_environ(simlib, **sim),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _two_runs(exe: Path, simlib: Path, **sim: object) -> tuple[int, list[dict]]:
    start = time.monotonic_ns() + 300 * MS
    procs = [_start(exe, simlib, "run", 20 * MS, 10, start, **sim) for _ in range(2)]
    outs = [p.communicate(timeout=30) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    return start, [json.loads(o.strip().splitlines()[-1]) for o, _ in outs]


def test_kernels_serialize_across_processes(timeline_probe, simlib, tmp_path) -> None:
    # Two processes each run 200 ms of kernels from the same moment on one GPU.
    start, runs = _two_runs(timeline_probe, simlib, state=tmp_path / "state")
    ends = sorted(r["end"] - start for r in runs)
    assert ends[0] >= 200 * MS
    assert 400 * MS <= ends[1] < 470 * MS  # the GPU ran 400 ms of work, one kernel at a time
    # Without a state file each process has its own timeline.
    start, runs = _two_runs(timeline_probe, simlib)
    assert all(200 * MS <= r["end"] - start < 270 * MS for r in runs)


PERIOD_NS = 166_666_667  # CGPU_SIM_UTIL_PERIOD_NS's default: NVML's 1/6 s

# Periods tile CLOCK_REALTIME; the scripts start their kernels 15 ms into a period (the
# timeline's 10 ms buckets split in proportion where a period boundary cuts one).
ALIGN = """
    import ctypes, json, os, subprocess, sys, time
    import pynvml as N
    exe, P = sys.argv[1], 166_666_667
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    real, mono = time.time_ns(), time.monotonic_ns()
    k = real // P + 2                      # the first period of the work
    start = mono + (k * P - real) + 15_000_000
    end_us = lambda period: (period + 1) * P // 1000
"""

SAMPLED = (
    ALIGN
    + """
    seen = int(time.time() * 1e6)
    # No launch throttle: all eight kernels queue at once, so a launcher kept off a loaded
    # machine's CPU cannot leave the device idle between them.
    p = subprocess.Popen([exe, "run", str(50_000_000), "8", str(start), "linger"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "CGPU_SIM_TIMESLICE_NS": "0"})
    entries, device, rates = [], [], []
    dev_seen = seen
    while time.time_ns() < (k + 4) * P:  # nvtop's loop: hand the newest timeStamp back
        time.sleep(0.02)
        try:
            for s in N.nvmlDeviceGetProcessUtilization(h, seen):
                entries.append((s.pid, s.smUtil, s.timeStamp, int(time.time() * 1e6)))
                seen = max(seen, s.timeStamp)
        except N.NVMLError_NotFound:
            pass
        try:
            _, got = N.nvmlDeviceGetSamples(h, N.NVML_GPU_UTILIZATION_SAMPLES, dev_seen)
            device += [(g.timeStamp, g.sampleValue.uiVal) for g in got]
            dev_seen = max([dev_seen] + [g.timeStamp for g in got])
        except N.NVMLError_NotFound:
            pass
        rates.append((time.time_ns(), N.nvmlDeviceGetUtilizationRates(h).gpu))
    pid = json.loads(p.stdout.readline())["pid"]
    p.stdin.close()
    p.wait()
    try:
        N.nvmlDeviceGetProcessUtilization(h, seen)
        later = "found"
    except N.NVMLError_NotFound:
        later = "not found"
    print(json.dumps({"k": k, "pid": pid, "entries": entries, "device": device,
                      "rates": rates, "later": later}))
"""
)


def test_samples_are_whole_periods_that_have_ended(timeline_probe, simlib, tmp_path, pynvml_ok):
    # 400 ms of kernels from 15 ms into period k: 151.7 ms of k (91%), all of k+1 (100%) and
    # 81.7 ms of k+2 (49%). Read every 20 ms as nvtop does, NVML shows each period once it has
    # ended, never before, in whole percent, stamped with its end.
    proc = run_py(
        simlib, SAMPLED.replace("sys.argv[1]", repr(str(timeline_probe))), state=tmp_path / "state"
    )
    assert proc.returncode == 0, proc.stderr
    r = json_out(proc)
    k, pid = r["k"], r["pid"]
    ends = [(k + i + 1) * PERIOD_NS // 1000 for i in range(3)]
    got = [(util, ts) for p, util, ts, _ in r["entries"] if p == pid]
    assert [ts for _, ts in got] == ends, got  # each period once, in order, stamped at its end
    utils = [util for util, _ in got]
    # A launcher that wakes d ms late moves d ms of work from period k to k+2 (a loaded CI
    # machine: up to a few ms); the whole 400 ms still lands in the three periods.
    assert 85 <= utils[0] <= 91 and utils[1] == 100 and 139 <= utils[0] + utils[2] <= 141, got
    for _, _, ts, at in r["entries"]:
        assert ts <= at < ts + 200_000, (ts, at)  # after its period ended, and not long after
    device = dict((ts, v) for ts, v in r["device"])
    assert [device.get(ts) for ts in ends] == utils, r["device"]  # one process: the same %
    assert all(v == 0 for ts, v in device.items() if ts not in ends), r["device"]
    # nvmlDeviceGetUtilizationRates: the last published period, whatever runs now (a period is
    # published up to 10 ms after its end, once the timeline's bucket it cuts is complete).
    def busy(period: int) -> int:
        return utils[period - k] if 0 <= period - k <= 2 else 0

    for t, gpu in r["rates"]:
        last = t // PERIOD_NS - 1
        if gpu != busy(last) and t % PERIOD_NS < 12 * MS:
            last -= 1  # read before that period was published
        assert gpu == busy(last), (t, gpu)
    assert r["later"] == "not found"


MEAN = (
    ALIGN
    + """
    seen = int(time.time() * 1e6)
    # Two 100 ms kernels in periods k and k + 3 (60% of each), nothing in between.
    p = subprocess.Popen([exe, "pulses", str(100_000_000), str(start), str(3 * P), "2"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = json.loads(p.stdout.readline())["pid"]
    time.sleep(max(0.0, ((k + 4) * P - time.time_ns()) / 1e9) + 0.02)
    late = [(s.pid, s.smUtil, s.timeStamp) for s in N.nvmlDeviceGetProcessUtilization(h, seen)]
    second = [(s.pid, s.smUtil, s.timeStamp)
              for s in N.nvmlDeviceGetProcessUtilization(h, end_us(k))]
    # The size rule: no array, or one too small, gives INSUFFICIENT_SIZE and the count.
    fn = N._nvmlGetFunctionPointer("nvmlDeviceGetProcessUtilization")
    count = ctypes.c_uint(0)
    rc_null = fn(h, None, ctypes.byref(count), ctypes.c_ulonglong(seen))
    null_count = count.value
    buf = (N.c_nvmlProcessUtilizationSample_t * 1)()
    count.value = 0
    rc_small = fn(h, buf, ctypes.byref(count), ctypes.c_ulonglong(seen))
    p.stdin.close()
    p.wait()
    print(json.dumps({"k": k, "pid": pid, "late": late, "second": second, "rc_null": rc_null,
                      "null_count": null_count, "rc_small": rc_small,
                      "small_count": count.value}))
"""
)


def test_a_late_reader_gets_the_mean_of_the_periods_a_process_ran(
    timeline_probe, simlib, tmp_path, pynvml_ok
):
    # As the driver's sample buffer does: one entry per process, the mean of its samples newer
    # than lastSeenTimeStamp, stamped with the newest. Over wall time the process was busy 30%
    # of those four periods; the entry says 60%.
    proc = run_py(
        simlib, MEAN.replace("sys.argv[1]", repr(str(timeline_probe))), state=tmp_path / "state"
    )
    assert proc.returncode == 0, proc.stderr
    r = json_out(proc)
    k, pid = r["k"], r["pid"]
    assert r["late"] == [[pid, 60, (k + 4) * PERIOD_NS // 1000]], r
    assert r["second"] == [[pid, 60, (k + 4) * PERIOD_NS // 1000]], r  # only period k + 3
    assert (r["rc_null"], r["null_count"]) == (7, 1), r  # NVML_ERROR_INSUFFICIENT_SIZE
    assert (r["rc_small"], r["small_count"]) == (7, 1), r


KILLED = """
    import json, os, signal, subprocess, sys, time
    import pynvml as N
    exe = sys.argv[1]
    # No time slice for it: it queues a whole second of work at once.
    hold = subprocess.Popen([exe, "hold", str(100_000_000), "10"], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "CGPU_SIM_TIMESLICE_NS": "0"})
    assert hold.stdout.readline().startswith("queued")
    os.kill(hold.pid, signal.SIGKILL)
    hold.wait()
    def run():
        out = subprocess.run([exe, "run", str(10_000_000), "1", "0"], capture_output=True,
                             text=True, check=True).stdout
        r = json.loads(out)
        return (r["end"] - r["begin"]) / 1e6
    first, second = run(), run()
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    pids = [p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(h)]
    try:
        util = [s.pid for s in N.nvmlDeviceGetProcessUtilization(h, 0)]
    except N.NVMLError_NotFound:
        util = []
    print(json.dumps({"killed": hold.pid, "first": first, "second": second, "pids": pids,
                      "util": util}))
"""


def test_a_killed_launcher_leaves_the_timeline_sane(timeline_probe, simlib, tmp_path, pynvml_ok):
    proc = run_py(
        simlib, KILLED.replace("sys.argv[1]", repr(str(timeline_probe))), state=tmp_path / "s"
    )
    assert proc.returncode == 0, proc.stderr
    r = json_out(proc)
    # Its queued second of work goes with it, as the driver tears its context down: the device
    # runs the newcomer's at once, not after the dead process's queue.
    assert 10 <= r["first"] < 60
    assert 10 <= r["second"] < 60
    assert r["killed"] not in r["pids"] and r["killed"] not in r["util"]


def test_launch_cost(run_timeline, tmp_path) -> None:
    costs = [
        json_out(run_timeline("cost", "200000", state=tmp_path / "state"))["launch_ns"]
        for _ in range(3)
    ]
    print(f"simulated launch: {min(costs):.0f} ns")
    assert min(costs) < 1000  # well under the limiter's 1 µs budget on top of it


SATURATE = """
    import json, subprocess, sys, time
    import pynvml as N
    exe = sys.argv[1]
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    start, real = time.monotonic_ns() + 600_000_000, time.time_ns() + 600_000_000
    P = 166_666_667  # from the first period that starts after them
    seen = (real // P + 1) * P // 1000
    procs = [subprocess.Popen([exe, "saturate", sys.argv[2], "1200", str(start)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    time.sleep(1.75)
    for _ in range(5):  # pynvml sizes, then fetches: a period closing between may add a process
        try:
            samples = {s.pid: s.smUtil for s in N.nvmlDeviceGetProcessUtilization(h, seen)}
            break
        except N.NVMLError_InsufficientSize:
            pass
    runs = [json.loads(p.stdout.readline()) for p in procs]
    # The device's busy % in each period wholly inside the 1.2 s of work (stamped at its end),
    # read after the work, so a late reader's wake-up cannot move the window.
    _, got = N.nvmlDeviceGetSamples(h, N.NVML_GPU_UTILIZATION_SAMPLES, seen)
    inside = [g.sampleValue.uiVal for g in got if g.timeStamp * 1000 <= real + 1_200_000_000]
    gpu = sum(inside) / len(inside) if len(inside) >= 4 else 0
    for p in procs:
        p.stdin.close()
        p.wait()
    print(json.dumps({"gpu": gpu, "inside": inside, "util": sorted(samples.values()),
                      "late_ms": [r["late_ns"] / 1e6 for r in runs],
                      "pids": sorted(samples) == sorted(r["pid"] for r in runs)}))
"""


def test_nvml_names_one_process_per_period_as_a_real_gpu_does(
    timeline_probe, simlib, tmp_path, pynvml_ok
) -> None:
    # By default, as a real H100 reports time-sliced processes (2026-11-25, driver
    # 580.159.04): each period is attributed to one process, with the device's busy %. So
    # every process NVML lists shows about the whole GPU, not its quarter.
    code = SATURATE.replace("sys.argv[1]", repr(str(timeline_probe)))
    proc = run_py(simlib, code.replace("sys.argv[2]", repr(str(10_000))), state=tmp_path / "s")
    assert proc.returncode == 0, proc.stderr
    r = json_out(proc)
    # Busy but for the context switches: a 50 µs switch after each 2 ms slice leaves 97.6%.
    assert r["gpu"] >= 96, r
    # (A period at the start or the end is not all busy: the mean of those won stays high.)
    assert 1 <= len(r["util"]) <= 4 and all(u >= 60 for u in r["util"]), r


@pytest.mark.parametrize("kernel_ns", [10_000, 20 * MS])
def test_saturating_processes_share_the_gpu(
    timeline_probe, simlib, tmp_path, pynvml_ok, kernel_ns: int
) -> None:
    # Four processes launch kernels as fast as they can for 1.2 s: the GPU is full and, as
    # each queues at most a time slice ahead, they take turns: a quarter each (NVML giving
    # each process its own busy % per period shows it).
    code = SATURATE.replace("sys.argv[1]", repr(str(timeline_probe)))
    proc = run_py(
        simlib,
        code.replace("sys.argv[2]", repr(str(kernel_ns))),
        state=tmp_path / "s",
        util_attribution="exact",
    )
    assert proc.returncode == 0, proc.stderr
    r = json_out(proc)
    assert r["gpu"] >= 96 and r["pids"], r  # all busy but the switches (above)
    # A launcher kept off the CPU longer than its queued work (~10 ms) loses device time,
    # which on a busy machine costs a few points; a 20 ms kernel is 1.7 points of the window.
    # With 10 us kernels four launchers keep two cores busy: a fresh-clone CI run on 2 cores
    # (2026-11-26) gave 21, 21, 27, 31 once, so the bound is 7 there (still a fair share: an
    # unfair timeline gives one process most of the GPU).
    slack = 7 if kernel_ns < MS else 5
    assert all(abs(u - 25) <= slack for u in r["util"]), r
    assert 96 <= sum(r["util"]) <= 102, r


BESIDE = """
    import ctypes, json, os, subprocess, sys, time
    exe, kernel_ns, holders = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    # Neighbours with 5 s of 100 ms kernels queued each (no launch throttle for them): still
    # busy when a loaded machine takes a second to start the newcomer.
    held = [subprocess.Popen([exe, "hold", str(100_000_000), "50"], stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "CGPU_SIM_TIMESLICE_NS": "0"})
            for _ in range(holders)]
    for h in held:
        assert h.stdout.readline().startswith("queued")
    run = {}
    if kernel_ns:
        out = subprocess.run([exe, "run", str(kernel_ns), "1", "0"], capture_output=True,
                             text=True, check=True).stdout
        run = json.loads(out)
    else:
        time.sleep(0.4)
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    nvml.cgpuSimProcessBusyNs.restype = ctypes.c_ulonglong
    nvml.cgpuSimProcessBusyNs.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_ulonglong,
                                          ctypes.c_ulonglong]
    assert nvml.nvmlInit_v2() == 0
    now_us = time.time_ns() // 1000
    busy = [nvml.cgpuSimProcessBusyNs(0, h.pid, now_us - 300_000, now_us - 100_000) / 1e6
            for h in held]
    for h in held:
        h.kill()
        h.wait()
    ms = (run["end"] - run["begin"]) / 1e6 if run else 0.0
    print(json.dumps({"ms": ms, "busy_ms": busy}))
"""


def _beside(exe: Path, simlib: Path, state: Path, kernel_ns: int, holders: int) -> dict:
    code = BESIDE.replace("sys.argv[1]", repr(str(exe)))
    code = code.replace("int(sys.argv[2])", str(kernel_ns))
    code = code.replace("int(sys.argv[3])", str(holders))
    proc = run_py(simlib, code, state=state)
    assert proc.returncode == 0, proc.stderr
    return json_out(proc)


@pytest.mark.parametrize("kernel_ms", [10, 50])
def test_a_newcomer_takes_turns_with_a_queued_neighbour(
    timeline_probe, simlib, tmp_path, kernel_ms: int
) -> None:
    # Beside a process with seconds of work queued, a newcomer's kernel does not wait for that
    # queue (first come, first served would take seconds): the device time-slices the two
    # contexts, 2 ms each and a switch between, so the kernel runs in about twice its time, a
    # 50 ms one preempted at each slice's end and resumed in the next. At best its first slice
    # starts at once and its last ends the run: n slices of its own and n - 1 of the
    # neighbour's, 2 ms short of twice its time (CI measured 18.8 ms for 10 ms).
    r = _beside(timeline_probe, simlib, tmp_path / "s", kernel_ms * MS, 1)
    # (The slack above is a loaded machine's late wake-ups; first come, first served: ~5000.)
    assert 2 * kernel_ms - 2 <= r["ms"] < 2 * kernel_ms * 1.06 + 40, r


def test_busy_time_is_what_each_process_ran(timeline_probe, simlib, tmp_path) -> None:
    # Two processes with 100 ms kernels queued: in any 200 ms each ran about half (less the
    # context switches), as the device alternated them; per-process busy time (NVML's source)
    # comes from those run intervals, not from whole kernels in launch order.
    r = _beside(timeline_probe, simlib, tmp_path / "s", 0, 2)
    assert all(88 <= b <= 101 for b in r["busy_ms"]), r
    assert 190 <= sum(r["busy_ms"]) <= 200, r


def test_launchers_killed_at_any_moment_leave_the_schedule_usable(
    timeline_probe, simlib, tmp_path
) -> None:
    # Launchers of 10 us kernels take the device's schedule lock thousands of times a second;
    # SIGKILLed at arbitrary moments (some inside it), they leave no lock held: the robust mutex
    # passes to the next process, whose kernels run at once.
    state = tmp_path / "s"
    for round_ in range(3):
        start = time.monotonic_ns()
        procs = [_start(timeline_probe, simlib, "saturate", 10_000, 5000, start, state=state)
                 for _ in range(4)]
        time.sleep(0.3 + 0.07 * round_)
        for p in procs:
            p.kill()
            p.wait()
    start = time.monotonic_ns()
    proc = _start(timeline_probe, simlib, "run", 20 * MS, 1, 0, state=state)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    r = json.loads(out.strip().splitlines()[-1])
    assert 20 * MS <= r["end"] - r["begin"] < 60 * MS, r
