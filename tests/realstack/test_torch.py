"""PyTorch (PyPI's CUDA 13 build) on the simulator under a 4 GiB slice.

It sees the slice, stops within one chunk of it with its own OutOfMemoryError for each of its
allocators, gives everything back, keeps vLLM's start-up profiling exact, and shares the slice
between two processes of one container. Without the shim it sees the whole simulated GPU.
"""

from __future__ import annotations

import pytest
from realkit import CHUNK, SIM_MEMORY, SLICE, Runner, require

FILL = """
    import torch, inside
    first = torch.zeros(1, device="cuda")   # held throughout, as a program's own tensors are

    def allocate():
        return torch.empty(inside.CHUNK, dtype=torch.uint8, device="cuda")

    def release(held):
        held.clear()
        torch.cuda.empty_cache()

    result = inside.exercise(allocate, release, torch.cuda.mem_get_info)
    props = torch.cuda.get_device_properties(0)
    inside.report(props_total=props.total_memory, **result)
"""

ALLOCATORS = {
    "native": "",
    "expandable_segments": "expandable_segments:True",
    "cudaMallocAsync": "backend:cudaMallocAsync",
}


@pytest.mark.parametrize("conf", ALLOCATORS.values(), ids=list(ALLOCATORS))
def test_torch_stops_at_the_slice(run_real: Runner, conf: str) -> None:
    require("torch")
    result = run_real(FILL, env={"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else None)
    assert result["total"] == SLICE and result["props_total"] == SLICE, result
    assert result["error"]["type"] == "torch.OutOfMemoryError", result["error"]
    # "CUDA out of memory. Tried to allocate ..." (cudaMallocAsync: "... (out of memory)")
    assert "out of memory" in result["error"]["message"].lower(), result["error"]
    assert SLICE - CHUNK < result["allocated"] + result["ledger_before"] <= SLICE, result
    assert result["free_full"] < CHUNK and result["ledger_full"] <= SLICE, result
    # Freeing gives everything back: the ledger and torch's own free figure.
    assert result["ledger_after"] == result["ledger_before"], result
    assert result["free_after"] == result["free_before"], result


def test_torch_vllm_profiling_is_exact(run_real: Runner) -> None:
    """vLLM sizes its KV cache from how far free memory falls while it loads the model."""
    require("torch")
    result = run_real("""
        import torch, inside
        first = torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        size = 768 << 20
        free0, total = torch.cuda.mem_get_info()
        weights = torch.empty(size, dtype=torch.uint8, device="cuda")
        free1, _ = torch.cuda.mem_get_info()
        del weights
        torch.cuda.empty_cache()
        free2, _ = torch.cuda.mem_get_info()
        inside.report(size=size, total=total, free0=free0, free1=free1, free2=free2)
    """)
    assert result["total"] == SLICE
    assert result["free0"] - result["free1"] == result["size"], result
    assert result["free2"] == result["free0"], result


def test_torch_bytes_survive_a_round_trip(run_real: Runner) -> None:
    require("torch")
    result = run_real("""
        import torch, inside
        host = torch.randint(-2**31, 2**31 - 1, (1 << 22,), dtype=torch.int32)
        dev = host.to("cuda")
        twin = dev.clone()                      # device to device
        pinned = torch.empty_like(host).pin_memory()
        pinned.copy_(twin, non_blocking=True)   # device to pinned host, async
        torch.cuda.synchronize()
        inside.report(back=bool(torch.equal(dev.cpu(), host)),
                      via_pinned=bool(torch.equal(pinned, host)))
    """)
    assert result == {"back": True, "via_pinned": True}


CHILD = """
import json, torch, inside
first = torch.zeros(1, device="cuda")
free, total = torch.cuda.mem_get_info()
try:
    torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    big = "allocated"
except torch.OutOfMemoryError as exc:
    big = type(exc).__name__
small = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
print(json.dumps({"free": free, "total": total, "big": big, "ledger": inside.ledger_used()}))
"""


def test_two_processes_of_one_container_share_the_slice(run_real: Runner) -> None:
    require("torch")
    result = run_real(f"""
        import json, subprocess, sys, torch, inside
        held = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
        out = subprocess.run([sys.executable, "-c", {CHILD!r}], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        inside.report(child=json.loads(out.stdout.splitlines()[-1]), after=inside.ledger_used())
    """)
    child = result["child"]
    assert child["total"] == SLICE
    assert child["free"] <= SLICE - (3 << 30), child
    assert child["big"] == "OutOfMemoryError", child
    # The parent's 3 GiB, the child's 256 MiB and both contexts, in one ledger; the child's
    # part comes back when it exits.
    assert (3 << 30) + (256 << 20) < child["ledger"] <= SLICE, child
    assert (3 << 30) <= result["after"] < (3 << 30) + (256 << 20), result


def test_torch_without_the_shim_sees_the_whole_gpu(run_real: Runner) -> None:
    require("torch")
    result = run_real(
        """
        import torch, inside
        free, total = torch.cuda.mem_get_info()
        inside.report(free=free, total=total,
                      props_total=torch.cuda.get_device_properties(0).total_memory)
        """,
        shim=False,
    )
    assert result["total"] == result["props_total"] == SIM_MEMORY
    assert SIM_MEMORY - CHUNK < result["free"] <= SIM_MEMORY


def test_torch_kernels_launch(run_real: Runner) -> None:
    """PyTorch's kernels (long C++ names, lazily loaded libraries) reach the simulated GPU."""
    require("torch")
    result = run_real("""
        import torch, inside
        x = torch.randn(4096, device="cuda")
        ops = {
            "rand": lambda: torch.rand(64, device="cuda"),
            "randint": lambda: torch.randint(0, 9, (64,), device="cuda"),
            "add": lambda: x + 1,
            "sum": lambda: x.sum(),
            "softmax": lambda: torch.softmax(x.view(64, 64), -1),
            "sort": lambda: x.sort(),
            "cumsum": lambda: x.cumsum(0),
            "dropout": lambda: torch.nn.functional.dropout(x, 0.5),
            "half": lambda: x.half(),
        }
        for op in ops.values():
            op()
        torch.cuda.synchronize()
        inside.report(ran=sorted(ops), shape=list(x.shape), device=str(x.device))
    """)
    assert len(result["ran"]) == 9
    assert result["shape"] == [4096] and result["device"] == "cuda:0"


def test_torch_sees_a_slice_on_each_gpu(run_real: Runner) -> None:
    """Two simulated GPUs: each shows the slice, and filling one leaves the other whole."""
    require("torch")
    result = run_real(
        """
        import torch, inside
        before = [torch.cuda.mem_get_info(i) for i in range(torch.cuda.device_count())]
        held = torch.empty(3 << 30, dtype=torch.uint8, device="cuda:1")
        inside.report(before=before, after=[torch.cuda.mem_get_info(i) for i in (0, 1)])
        """,
        env={"CGPU_SIM_DEVICES": "2"},
    )
    assert [total for _, total in result["before"]] == [SLICE, SLICE]
    (free0, _), (free1, _) = result["after"]
    assert free0 == result["before"][0][0]
    assert free1 == result["before"][1][0] - (3 << 30)
