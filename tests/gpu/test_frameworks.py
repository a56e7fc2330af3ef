"""PyTorch, CuPy and nvidia-smi under the shim on a real GPU."""

from __future__ import annotations

import os
import sys

import pytest

GiB = 1 << 30

TORCH_FILL = """
import torch
free, total = torch.cuda.mem_get_info()
print("mem_get_info", free, total)
held = []
try:
    while True:
        held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
except torch.cuda.OutOfMemoryError:
    pass
print("held", len(held) * 256)
"""

CUPY_FILL = """
import cupy
held = []
try:
    while True:
        held.append(cupy.empty(256 << 20, dtype=cupy.uint8))
except cupy.cuda.memory.OutOfMemoryError:
    pass
print("held", len(held) * 256)
"""


def _value(out: str, key: str) -> list[int]:
    for line in out.splitlines():
        if line.startswith(key + " "):
            return [int(v) for v in line.split()[1:]]
    raise AssertionError(f"{key} missing in {out}")


@pytest.mark.gpu
def test_torch_allocation_stops_at_the_slice(cgpu_run):
    pytest.importorskip("torch")
    out = cgpu_run("4GiB", sys.executable, "-c", TORCH_FILL)
    assert out.returncode == 0, out.stderr
    free, total = _value(out.stdout, "mem_get_info")
    assert total == 4 * GiB and free <= total
    held_mib = _value(out.stdout, "held")[0]
    assert 2048 <= held_mib <= 4096


@pytest.mark.gpu
def test_torch_expandable_segments_are_limited(cgpu_run):
    pytest.importorskip("torch")
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    out = cgpu_run("4GiB", sys.executable, "-c", TORCH_FILL, env=env)
    assert out.returncode == 0, out.stderr
    assert 2048 <= _value(out.stdout, "held")[0] <= 4096


@pytest.mark.gpu
def test_cupy_allocation_stops_at_the_slice(cgpu_run):
    pytest.importorskip("cupy")
    out = cgpu_run("4GiB", sys.executable, "-c", CUPY_FILL)
    assert out.returncode == 0, out.stderr
    assert 2048 <= _value(out.stdout, "held")[0] <= 4096


@pytest.mark.gpu
def test_nvidia_smi_shows_the_slice(cgpu_run):
    out = cgpu_run(
        "4GiB",
        "nvidia-smi",
        "--query-gpu=memory.total,memory.used",
        "--format=csv,noheader,nounits",
    )
    assert out.returncode == 0, out.stderr
    total, _used = (int(v) for v in out.stdout.strip().splitlines()[0].split(","))
    assert total == 4096
