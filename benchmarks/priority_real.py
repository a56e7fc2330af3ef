"""Priorities on a real GPU (issue 35): `high` inference beside a saturating `low` trainer, with
PyTorch's own kernels, under the host's compute arbiter.

    python benchmarks/priority_real.py [--seconds 6] [--rate 50] [--json FILE]

The inference process serves requests arriving as a Poisson process at --rate per second; each
request is a few fp16 matrix products (about 2 ms of GPU time alone, sized at start-up by timing
them alone) and a torch.cuda.synchronize(): its answer read back. A request that arrives while an
earlier one runs waits for it (one server, first come first served). Latency: from its arrival
to the end of its sync; p50 and p99 over the requests that arrived after the first second.
The trainer launches matrix products of about 1 ms or 10 ms (sized the same way) back to back,
four at a time, and counts those finished in each second: its GPU time is that count x one
product's time alone; the inference's is its requests x one request's time alone.

Cases: the inference alone; `high` beside a `low` trainer (1 ms and 10 ms products); `normal`
beside `normal` (1 ms and 10 ms) as the baseline. The priorities come from each container's
cgpu.conf, as the device plugin writes it: the inference `compute <uuid> 30 share <priority>`,
the trainer `compute <uuid> 70 share <priority>`. Each process runs under the shim
(LD_PRELOAD=libcgpu.so, CGPU_LEDGER_DIR=its container) and one `cgpu compute-arbiter` serves
them all. Goals (as benchmarks/compute_share.py's `--cases priority` on the simulator):
p99(high beside low, 1 ms) <= 1.5 x p99(alone), and the trainer keeps >= 80% of the GPU time the
inference leaves in every 1 s window from the second; p99(high beside low, 10 ms) <= 2.5 x.

About 10 s a case and 15 s of sizing on an H100 or H200: some 70 s in all. On the simulator
(CGPU_SIM_STATE set, the simulator's libraries on LD_LIBRARY_PATH) every kernel takes
CGPU_SIM_KERNEL_NS whatever its size, so each process is given its own: 0.5 ms for the
inference's products, 1 ms or 10 ms for the trainer's; the figures then only show that it runs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compute_share_real import bare_env, gpu_uuid, make_container, start_arbiter, stop_arbiter

WORKER = r"""
import json, random, statistics, sys, time, torch
role, target_ms, n, reps = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.cuda.init()

def operands(n):
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    return a, b, torch.empty(n, n, device="cuda", dtype=torch.float16)

def timed(n, k):
    a, b, c = operands(n)
    torch.mm(a, b, out=c); torch.cuda.synchronize()
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(k):
            torch.mm(a, b, out=c)
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t0) / k)
    del a, b, c
    return statistics.median(rounds)

if n == 0:  # sizing, alone: one product of about target_ms (fp16 at ~500 TFLOP/s: n^3 * 2 / 5e14)
    n = max(256, round((target_ms * 1e-3 * 5e14 / 2) ** (1 / 3) / 128) * 128)
    k = max(2, round(20 / target_ms))
    for _ in range(3):
        t = timed(n, k)
        n = min(16384, max(256, round(n * (target_ms * 1e-3 / t) ** (1 / 3) / 128) * 128))
    t = timed(n, k)
    print(json.dumps({"n": n, "ms": t * 1e3}), flush=True)
    sys.exit(0)

a, b, c = operands(n)
def unit():
    for _ in range(reps):
        torch.mm(a, b, out=c)
unit(); torch.cuda.synchronize()
print("ready", flush=True)
start_at, seconds, rate = map(float, sys.stdin.readline().split())
while time.time() < start_at:
    time.sleep(0.0005)
t0 = time.perf_counter()
if role == "inference":
    rng = random.Random(35)
    arrival, out = 0.0, []
    while True:
        arrival += rng.expovariate(rate)
        if arrival >= seconds:
            break
        left = t0 + arrival - time.perf_counter()
        if left > 0:
            time.sleep(left)  # an arrival already past waited for the one before it
        unit()
        torch.cuda.synchronize()
        out.append([round(arrival, 6), round((time.perf_counter() - t0 - arrival) * 1e3, 4)])
else:
    out = [0] * int(seconds)
    while True:
        for _ in range(4):
            unit()
        torch.cuda.synchronize()
        w = int(time.perf_counter() - t0)
        if w >= len(out):
            break
        out[w] += 4
print(json.dumps(out), flush=True)
"""

INFER_MS, INFER_PRODUCTS = 2.0, 4  # a request: four products of about 0.5 ms
INFER_LIMIT, TRAINER_LIMIT = 30, 70  # both `share`
CASES = [  # (name, trainer's product ms or 0: alone, inference's priority, trainer's)
    ("inference alone", 0, "high", ""),
    ("high beside low, 1 ms", 1, "high", "low"),
    ("high beside low, 10 ms", 10, "high", "low"),
    ("normal beside normal, 1 ms", 1, "normal", "normal"),
    ("normal beside normal, 10 ms", 10, "normal", "normal"),
]
GOALS = {"high beside low, 1 ms": (1.5, 0.8), "high beside low, 10 ms": (2.5, None)}


def role_env(env: dict[str, str], product_ms: float) -> dict[str, str]:
    """On the simulator, each process's kernels take its own products' time."""
    if "CGPU_SIM_STATE" in env:
        return dict(env, CGPU_SIM_KERNEL_NS=str(int(product_ms * 1e6)))
    return env


def fail(what: str, proc: subprocess.Popen, log: Path) -> SystemExit:
    proc.kill()
    proc.wait()
    tail = log.read_text()[-3000:] if log.exists() else ""
    return SystemExit(f"{what} failed ({proc.returncode}):\n{tail}")


def size(env: dict[str, str], product_ms: float, tmp: Path) -> tuple[int, float]:
    """Size one product of about product_ms alone; returns (n, its ms)."""
    log = tmp / f"size{product_ms}.log"
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, "size", str(product_ms), "0", "1"],
        env=role_env(env, product_ms),
        stdout=subprocess.PIPE,
        stderr=open(log, "w"),  # noqa: SIM115
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise SystemExit(f"sizing a {product_ms} ms product failed:\n{log.read_text()[-3000:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return got["n"], got["ms"]


def run_case(
    workers: list[tuple[str, dict[str, str], float, int, int]],
    seconds: float,
    rate: float,
    tmp: Path,
) -> dict[str, list]:
    """Start every worker, wait until each is ready (context, operands, a first product), start
    them together; returns each one's output."""
    procs = []
    for name, env, product_ms, n, reps in workers:
        log = tmp / f"{name}.log"
        proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, name, str(product_ms), str(n), str(reps)],
            env=role_env(env, product_ms),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(log, "w"),  # noqa: SIM115
            text=True,
        )
        procs.append((name, proc, log))
    for name, proc, log in procs:
        if proc.stdout.readline().strip() != "ready":
            raise fail(name, proc, log)
    start_at = time.time() + 0.3
    for name, proc, _ in procs:
        # the trainer outlives the inference's last request
        length = seconds if name == "inference" else seconds + 0.5
        proc.stdin.write(f"{start_at} {length} {rate}\n")
        proc.stdin.flush()
    out = {}
    for name, proc, log in procs:
        try:
            stdout, _ = proc.communicate(timeout=seconds + 60)
        except subprocess.TimeoutExpired:
            raise fail(f"{name} (no answer in {seconds + 60:.0f} s)", proc, log) from None
        if proc.returncode != 0:
            raise fail(name, proc, log)
        out[name] = json.loads(stdout.strip().splitlines()[-1])
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--json", type=Path, help="write every latency and window here too")
    args = parser.parse_args()
    if args.seconds < 3:
        raise SystemExit("--seconds: at least 3 (the first second is left out)")

    bare = bare_env()
    try:
        uuid = gpu_uuid()
    except Exception as e:
        raise SystemExit(
            f"no GPU seen through NVML ({e}): a real GPU, or the simulator's "
            "libraries on LD_LIBRARY_PATH with CGPU_SIM_STATE set"
        ) from None
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        sizes = {
            "inference": size(bare, INFER_MS / INFER_PRODUCTS, tmp),
            1: size(bare, 1.0, tmp),
            10: size(bare, 10.0, tmp),
        }
        n_infer, product_ms = sizes["inference"]
        reps = max(1, round(INFER_MS / product_ms))
        request_ms = reps * product_ms
        root = tmp / "containers"
        root.mkdir()
        arbiter = start_arbiter(tmp, root, bare)
        results = {}
        try:
            for index, (name, trainer_ms, infer_priority, trainer_priority) in enumerate(CASES):
                case = root.parent / f"case{index}"
                case.mkdir()
                env = make_container(
                    root / f"case{index}-inference", uuid,
                    (INFER_LIMIT, "share", infer_priority), bare, arbiter, tmp,
                )  # fmt: skip
                workers = [("inference", env, INFER_MS / INFER_PRODUCTS, n_infer, reps)]
                if trainer_ms:
                    env = make_container(
                        root / f"case{index}-trainer", uuid,
                        (TRAINER_LIMIT, "share", trainer_priority), bare, arbiter, tmp,
                    )  # fmt: skip
                    workers.append(("trainer", env, trainer_ms, sizes[trainer_ms][0], 1))
                results[name] = run_case(workers, args.seconds, args.rate, case)
        finally:
            stop_arbiter(arbiter, tmp)

    import pynvml

    gpu = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
    gpu = gpu.decode() if isinstance(gpu, bytes) else gpu
    windows = int(args.seconds)
    print(
        f"# {time.strftime('%Y-%m-%d')} {gpu}: requests at {args.rate:.0f}/s (Poisson), each "
        f"{reps} fp16 products n={n_infer} ({request_ms:.2f} ms alone); trainer products n="
        f"{sizes[1][0]} ({sizes[1][1]:.2f} ms) and n={sizes[10][0]} ({sizes[10][1]:.2f} ms); "
        f"inference share {INFER_LIMIT}, trainer share {TRAINER_LIMIT}; latency over the "
        "requests from the second second, GPU time per 1 s window from the second"
    )
    alone_p99 = float("nan")
    verdicts = []
    report = {"sizes": {str(k): v for k, v in sizes.items()}, "request_ms": request_ms}
    for name, trainer_ms, _, _ in CASES:
        got = results[name]
        lat = [ms for arrival, ms in got["inference"] if arrival >= 1.0]
        if not lat:
            raise SystemExit(f"{name}: no request after the first second")
        p50, p99 = percentile(lat, 0.5), percentile(lat, 0.99)
        line = f"  {name:28s} n {len(lat):4d}  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms"
        line += f"  max {max(lat):7.2f} ms"
        figures = {"requests": len(lat), "p50": p50, "p99": p99, "max": max(lat)}
        if not trainer_ms:
            alone_p99 = p99
            print(line)
            report[name] = figures
            continue
        infer = [0.0] * windows
        for arrival, _ in got["inference"]:
            if int(arrival) < windows:
                infer[int(arrival)] += request_ms / 10  # percent of a 1 s window
        trainer = [count * sizes[trainer_ms][1] / 10 for count in got["trainer"][:windows]]
        kept = [t / max(1e-9, 100 - i) for t, i in zip(trainer[1:], infer[1:], strict=True)]
        ratio = p99 / alone_p99
        line += f"  = {ratio:4.1f}x alone; inference {min(infer[1:]):4.1f}-{max(infer[1:]):4.1f}%"
        line += f", trainer {min(trainer[1:]):4.1f}-{max(trainer[1:]):4.1f}%"
        line += f", keeps {100 * min(kept):5.1f}-{100 * max(kept):5.1f}% of the rest"
        print(line)
        figures.update(ratio=ratio, inference=infer, trainer=trainer, kept=kept)
        report[name] = figures
        if name in GOALS:
            most, keep = GOALS[name]
            ok = ratio <= most
            verdicts.append(
                f"goal {name}: p99 <= {most}x alone: {ratio:.2f}x {'met' if ok else 'MISSED'}"
            )
            if keep is not None:
                ok = min(kept) >= keep
                verdicts.append(
                    f"goal {name}: trainer keeps >= {100 * keep:.0f}% of what the inference "
                    f"leaves in every window: {100 * min(kept):.1f}% {'met' if ok else 'MISSED'}"
                )
    print("\n".join(verdicts))
    missed = sum("MISSED" in v for v in verdicts)
    print(
        "every goal met" if not missed else f"{missed} goal(s) missed",
        f"({time.monotonic() - started:.0f} s)",
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
