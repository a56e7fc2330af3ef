"""The `run_real` fixture: a script of the real CUDA stack on the simulator (see realkit)."""

from __future__ import annotations

from pathlib import Path

import pytest
from realkit import Runner, runner
from vllmkit import make_model, require_vllm


@pytest.fixture
def run_real(tmp_path: Path) -> Runner:
    """Run Python code under `cgpu run --gpu-mem 4GiB` (or bare); return its RESULT report."""
    return runner(tmp_path)


@pytest.fixture(scope="session")
def vllm_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama's directory for vLLM (config and tokenizer; --load-format dummy)."""
    require_vllm()
    return make_model(tmp_path_factory.mktemp("model") / "tiny-llama")
