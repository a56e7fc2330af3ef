"""vLLM 0.33 (.venv-vllm), eager, on an 8 GiB simulated GPU, each server under
`cgpu run --gpu-mem 3GiB --simulate`: a tiny Qwen2ForCausalLM (default utilization, then
--gpu-memory-utilization 0.5, both at once on the one GPU) and a tiny GPT2LMHeadModel.
Checks: start, KV cache figure vs utilization x slice, /v1/completions, /v1/chat/completions,
ledger vs the driver's per-process figure. Run by the main venv's Python:
    /work/main/.venv/bin/python /work/wt/check24/vllm_check.py [phase ...]   (phases: qwen gpt2)
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAIN = Path("/work/main")
VLLM = MAIN / ".venv-vllm" / "bin" / "vllm"
CGPU = MAIN / ".venv" / "bin" / "cgpu"
OUT = HERE / "out" / "vllm"
SIM_MEMORY = "8GiB"
SLICE_GIB = 3
GiB, MiB = 1 << 30, 1 << 20
COMMON = ["--load-format", "dummy", "--enforce-eager", "--max-model-len", "256", "--max-num-seqs", "4"]


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("CGPU_", "VLLM_"))}
    e.update(CGPU_SIM_MEMORY=SIM_MEMORY, CGPU_SIM_STATE=str(OUT / "sim"), HF_HUB_OFFLINE="1",
             VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", VLLM_CACHE_ROOT=str(OUT / "vllm-cache"),
             PYTHONUNBUFFERED="1", VLLM_LOGGING_LEVEL="DEBUG")
    return e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, name: str, model: Path, args: list[str]) -> None:
        self.name, self.model, self.args, self.port = name, model, args, free_port()
        self.log_path = OUT / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self.cmd = [str(CGPU), "run", "--gpu-mem", f"{SLICE_GIB}GiB", "--simulate", "--state-dir",
                    str(OUT / "state"), "--", str(VLLM), "serve", str(model), "--served-model-name",
                    name, "--host", "127.0.0.1", "--port", str(self.port), *COMMON, *args]

    def start(self) -> "Server":
        (OUT / "state").mkdir(parents=True, exist_ok=True)
        print(f"[{time.strftime('%H:%M:%S')}] start {self.name}: {' '.join(self.cmd)}", flush=True)
        self.t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.cmd, env=env(), stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        return self

    def wait_ready(self, timeout: float = 420) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                print(f"{self.name}: exited rc={self.proc.returncode}\n{self.tail()}")
                return False
            try:
                with urllib.request.urlopen(self.url("/health"), timeout=5) as r:
                    if r.status == 200:
                        self.ready_s = time.monotonic() - self.t0
                        print(f"{self.name}: ready in {self.ready_s:.0f} s", flush=True)
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1)
        print(f"{self.name}: NOT ready in {timeout} s\n{self.tail()}")
        return False

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def post(self, path: str, body: dict) -> tuple[int, object]:
        req = urllib.request.Request(self.url(path), data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=180) as r:
                return r.status, json.loads(r.read().decode())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()[:500]

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.splitlines()[-n:])

    def figures(self) -> dict:
        lines = {}
        for key, pat in (("kv_cache", r"Available KV cache memory: ([0-9.]+) GiB"),
                         ("kv_tokens", r"GPU KV cache size: ([0-9,]+) tokens"),
                         ("max_concurrency", r"Maximum concurrency for [0-9,]+ tokens per request: ([0-9.]+)x"),
                         ("model_load", r"Model loading took ([0-9.]+) Gi?B"),
                         ("initial_free_requested", r"Initial free memory: (.*)"),
                         ("after_profiling", r"Free memory after profiling: (.*)"),
                         ("error", r"(ValueError: .*|RuntimeError: .*|OutOfMemoryError.*)")):
            m = re.search(pat, self.log)
            lines[key] = m.group(1).strip() if m else None
        return lines

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


def ledger() -> list[dict]:
    """`cgpu ledger --state-dir` (text, printed) and its JSON; per pid, the driver's own figure."""
    text = subprocess.run([str(CGPU), "ledger", "--state-dir", str(OUT / "state")], capture_output=True,
                          text=True).stdout
    print("-- cgpu ledger --state-dir", OUT / "state")
    print(text.rstrip())
    recs = json.loads(subprocess.run([str(CGPU), "ledger", "--json", "--state-dir", str(OUT / "state")],
                                     capture_output=True, text=True).stdout)
    sys.path.insert(0, str(MAIN / "tests" / "realstack"))
    os.environ.update(CGPU_SIM_MEMORY=SIM_MEMORY, CGPU_SIM_STATE=str(OUT / "sim"))
    import rt
    out = []
    for r in recs:
        for p in r.get("processes", []):
            used = sum(p["used"].values()) if isinstance(p["used"], dict) else p["used"]
            if used:
                drv = rt.driver_used(p["pid"])
                out.append(dict(container=r["key"], pid=p["pid"], ledger_MiB=round(used / MiB, 1),
                                driver_MiB=round(drv / MiB, 1), driver_minus_ledger_MiB=round((drv - used) / MiB, 1)))
        for d in r.get("devices", []):
            out.append(dict(container=r["key"], used_MiB=round(d["used"] / MiB, 1),
                            slice_MiB=round(d["limit"] / MiB, 1), peak_MiB=round(d["peak"] / MiB, 1)))
    for row in out:
        print("LEDGER", json.dumps(row))
    return out


def requests(s: Server, chat: bool) -> dict:
    res = {}
    code, ans = s.post("/v1/completions", {"model": s.name, "prompt": "hello world the", "max_tokens": 8,
                                           "temperature": 0, "ignore_eos": True})
    res["completions"] = (code, ans if code != 200 else {"text": ans["choices"][0]["text"], "usage": ans["usage"]})
    code, ans = s.post("/v1/completions", {"model": s.name, "prompt": ["hello", "world w1 w2", "the a", "cgpu slice"],
                                           "max_tokens": 16, "ignore_eos": True, "temperature": 0.8})
    res["completions_batch4"] = (code, ans if code != 200 else [c["finish_reason"] for c in ans["choices"]] + [ans["usage"]])
    code, ans = s.post("/v1/chat/completions", {"model": s.name, "messages": [{"role": "user", "content": "hello world"}],
                                                "max_tokens": 8, "ignore_eos": True, "temperature": 0})
    res["chat"] = (code, ans if code != 200 else {"content": ans["choices"][0]["message"]["content"],
                                                  "usage": ans["usage"]})
    code, ans = s.post("/v1/completions", {"model": s.name, "prompt": " ".join(["hello"] * 300), "max_tokens": 4})
    res["too_long_prompt_300_tokens"] = (code, ans if code != 200 else "accepted?!")
    for k, v in res.items():
        print(f"{s.name} {k}: {json.dumps(v)[:400]}", flush=True)
    return res


def main(phases: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    report: dict = {}
    models = HERE / "models"
    if "qwen" in phases:
        q = Server("qwen", models / "tiny-qwen2", [])
        q50 = Server("qwen-u05", models / "tiny-qwen2", ["--gpu-memory-utilization", "0.5"])
        try:
            if q.start().wait_ready():
                report["qwen"] = dict(ready_s=round(q.ready_s), **q.figures(), **requests(q, True))
                ledger()
            else:
                report["qwen"] = dict(failed=q.tail(), **q.figures())
            if q50.start().wait_ready():
                report["qwen-u05"] = dict(ready_s=round(q50.ready_s), **q50.figures(), **requests(q50, True))
            else:
                report["qwen-u05"] = dict(failed=q50.tail(), **q50.figures())
            report["ledger_qwen_both"] = ledger()
        finally:
            q.stop()
            q50.stop()
    if "qwenfix" in phases:  # the same, with the tokenizer given apart (no config.json beside it)
        tok = ["--tokenizer", str(models / "tok-qwen2")]
        q = Server("qwen-t", models / "tiny-qwen2", tok)
        q50 = Server("qwen-t-u05", models / "tiny-qwen2", [*tok, "--gpu-memory-utilization", "0.5"])
        try:
            for s in (q, q50):
                if s.start().wait_ready():
                    report[s.name] = dict(ready_s=round(s.ready_s), **s.figures(), **requests(s, True))
                else:
                    report[s.name] = dict(failed=s.tail(), **s.figures())
            report["ledger_qwen_t_both"] = ledger()
        finally:
            q.stop()
            q50.stop()
    for phase, model, extra in (("mistral", "tiny-mistral", ["--tokenizer", str(models / "tok-qwen2")]),
                                ("qwen-defaults", "tiny-qwen2", ["--tokenizer", str(models / "tok-qwen2")])):
        if phase not in phases:
            continue
        s = Server(phase, models / model, extra)
        if phase == "qwen-defaults":  # vLLM's defaults: torch.compile and CUDA graphs on
            s.cmd.remove("--enforce-eager")
        try:
            if s.start().wait_ready():
                report[phase] = dict(ready_s=round(s.ready_s), **s.figures(), **requests(s, True))
                report[f"ledger_{phase}"] = ledger()
            else:
                report[phase] = dict(failed=s.tail(), **s.figures())
        finally:
            s.stop()
    if "gpt2" in phases:
        g = Server("gpt2", models / "tiny-gpt2", [])
        try:
            if g.start().wait_ready():
                report["gpt2"] = dict(ready_s=round(g.ready_s), **g.figures(), **requests(g, False))
                report["ledger_gpt2"] = ledger()
            else:
                report["gpt2"] = dict(failed=g.tail(), **g.figures())
        finally:
            g.stop()
    for name in ("qwen", "qwen-u05", "qwen-t", "qwen-t-u05", "mistral", "qwen-defaults", "gpt2"):
        if name in report:
            print(name, json.dumps({k: v for k, v in report[name].items() if k != "failed"})[:1500])
    (OUT / f"report-{'-'.join(phases)}.json").write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main(sys.argv[1:] or ["qwen", "gpt2"])
