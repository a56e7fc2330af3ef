"""vLLM servers under `cgpu run --gpu-mem` on the simulated GPU, for test_vllm.py.

vLLM lives in a venv of its own, .venv-vllm (scripts/install-vllm.sh, pins in
requirements-vllm.txt); `cgpu run` from the main venv runs its `vllm serve` as the child. Each
server is one container: a `cgpu run` of its own, all of them with one state directory and
one simulator state file, so they share one simulated GPU as containers share a real one.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pinkit import cgpu_command, pinned, require_pinned

from cgpu.core.containers import list_container_dirs, read_meta
from cgpu.core.layout import LEDGER_NAME
from cgpu.core.ledger import read_ledger

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VENV = ROOT / ".venv-vllm"
REQUIREMENTS = HERE / "requirements-vllm.txt"
GiB = 1 << 30
MODEL_NAME = "tiny"
MAX_MODEL_LEN = 512
# The tests' simulated GPU and slices: a third 2 GiB server does not fit beside two.
SIM_MEMORY = "5GiB"
SLICE = 2 * GiB
UTILIZATION = 0.92  # vLLM 0.33's default --gpu-memory-utilization
# What vLLM asks for: gpu_memory_utilization x the slice.
REQUESTED = UTILIZATION * SLICE
# Start-up on two cores: the engine, its profiling run, the HTTP server.
READY_S = 600


def require_vllm() -> None:
    """Fail unless .venv-vllm holds vLLM at its pinned version."""
    want = pinned(REQUIREMENTS)["vllm"]
    found = sorted(VENV.glob("lib/python*/site-packages/vllm-*.dist-info"))
    have = found[0].name.removeprefix("vllm-").removesuffix(".dist-info") if found else None
    if have != want:
        require_pinned("vllm", want, have)  # fails, naming the pin


def make_model(directory: Path) -> Path:
    """A tiny Llama's directory (config and tokenizer, no weights), written by vLLM's venv."""
    python = str(VENV / "bin" / "python")
    subprocess.run([python, str(HERE / "tiny_model.py"), str(directory)], check=True, timeout=120)
    return directory


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Simulated:
    """One simulated GPU of `memory` bytes: its state file and the containers' state dir."""

    root: Path
    memory: str

    def env(self) -> dict[str, str]:
        """The environment every server on this GPU runs with."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CGPU_", "VLLM_"))}
        env.update(
            CGPU_SIM_MEMORY=self.memory,
            CGPU_SIM_STATE=str(self.root / "sim"),
            HF_HUB_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            VLLM_SERVER_DEV_MODE="1",  # /sleep, /wake_up, /is_sleeping
            # VLLM_USE_V2_MODEL_RUNNER and VLLM_USE_FLASHINFER_SAMPLER are left to `cgpu run`,
            # which gives vLLM what the simulator needs (cgpu.core.paths), as a user gets it.
            VLLM_CACHE_ROOT=str(self.root / "vllm-cache"),
            PYTHONUNBUFFERED="1",
        )
        return env

    @property
    def state_dir(self) -> Path:
        return self.root / "state"


@dataclass
class Server:
    """`cgpu run --gpu-mem SLICE -- vllm serve MODEL ...`, its log in a file."""

    gpu: Simulated
    name: str
    model: Path
    gpu_mem: str
    args: list[str] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.gpu.root / f"{self.name}.log"

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def start(self) -> Server:
        """Start the server (not waiting for it)."""
        cmd = [*cgpu_command(), "run", "--gpu-mem", self.gpu_mem, "--simulate"]
        cmd += ["--state-dir", str(self.gpu.state_dir), "--"]
        cmd += [str(VENV / "bin" / "vllm"), "serve", str(self.model), "--load-format", "dummy"]
        cmd += ["--served-model-name", MODEL_NAME, "--max-model-len", str(MAX_MODEL_LEN)]
        cmd += ["--host", "127.0.0.1", "--port", str(self.port), *self.args]
        self.gpu.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd,
                env=self.gpu.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def wait_ready(self, timeout: float) -> bool:
        """True once /health answers 200; False when the server exits first."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url("/health"), timeout=5) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1)
        raise AssertionError(f"{self.name}: not ready in {timeout:.0f} s:\n{self.tail()}")

    def wait_exit(self, timeout: float) -> int:
        """The exit status of `cgpu run` (vLLM's)."""
        assert self.proc is not None
        return self.proc.wait(timeout)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def post(self, path: str, body: dict[str, Any] | None = None, timeout: float = 120) -> Any:
        """POST JSON (or nothing), return the decoded answer ({} when it is empty)."""
        data = json.dumps(body).encode() if body is not None else b""
        req = urllib.request.Request(
            self.url(path),
            data=data,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
        return json.loads(text) if text.strip() else {}

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url(path), timeout=30) as r:
            return json.loads(r.read().decode())

    def complete(self, prompt: str = "hello world the", max_tokens: int = 8) -> dict[str, Any]:
        """One completion over the OpenAI-compatible API."""
        body = {
            "model": MODEL_NAME,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
        }
        return self.post("/v1/completions", body)

    def ledger_used(self) -> int:
        """Bytes the container's ledger says its processes hold on the GPU."""
        assert self.proc is not None
        for d in list_container_dirs(self.gpu.state_dir):
            if read_meta(d).get("pid") == self.proc.pid:
                snap = read_ledger(d / LEDGER_NAME)
                return sum(dev.used for dev in snap.devices)
        raise AssertionError(f"{self.name}: no container directory for pid {self.proc.pid}")

    def kv_cache_gib(self) -> float:
        """The KV cache vLLM sized at start-up, from its log line, in GiB."""
        found = re.search(r"Available KV cache memory: ([0-9.]+) GiB", self.log)
        assert found, f"{self.name}: no KV cache line:\n{self.tail()}"
        return float(found.group(1))

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.splitlines()[-lines:])

    def stop(self) -> None:
        """SIGINT to `cgpu run` (it forwards it to vLLM); the process group goes after 60 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


def assert_serves(server: Server) -> None:
    """A completion request is answered with text and the tokens asked for."""
    answer = server.complete(max_tokens=8)
    assert answer["object"] == "text_completion", answer
    choice = answer["choices"][0]
    assert isinstance(choice["text"], str), answer
    assert answer["usage"]["completion_tokens"] == 8, answer
