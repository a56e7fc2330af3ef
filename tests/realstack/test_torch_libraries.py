"""PyTorch's libraries on the simulator under a 4 GiB slice: cuBLAS (matmul, nn.Linear),
scaled-dot-product attention, cuDNN (nn.Conv2d), CUDA graphs and torch.compile (Triton).

Kernels compute nothing on the simulator; what is checked is that the libraries start, choose
their kernels and launch them, and that the memory they reserve (cuBLAS and cuDNN workspaces,
graph pools) is charged to the slice: the ledger grows with it, and what the driver holds
for the process beyond the ledger stays the rounding of the libraries' module globals (the
shim charges the globals each fatbin's cubin declares, native/shim/hooks_module.c; the
simulator takes a 2 MiB page for each module with any).
"""

from __future__ import annotations

from pathlib import Path

from realkit import SLICE, Runner, require

MiB = 1 << 20
# What the driver may hold beyond the ledger: the rounding of the fat binaries' module globals
# (each module's to the 2 MiB granularity on the simulator; the shim charges the bytes).
MODULE_GLOBALS = 128 * MiB

LIBRARIES = """
    import os, torch, inside, rt
    import torch.nn.functional as F

    def gap():
        return rt.driver_used(os.getpid()) - inside.ledger_used()

    def libraries():
        ran = []
        for dt in (torch.float32, torch.float16, torch.bfloat16):
            a = torch.randn(256, 256, device="cuda", dtype=dt)
            ran.append(f"matmul {dt}: {tuple((a @ a).shape)}")
        x = torch.randn(8, 64, device="cuda")
        ran.append(f"linear: {tuple(torch.nn.Linear(64, 32).cuda()(x).shape)}")
        for dt in (torch.float16, torch.bfloat16):
            q = torch.randn(2, 4, 128, 64, device="cuda", dtype=dt)
            out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
            ran.append(f"sdpa {dt}: {tuple(out.shape)}")
        conv = torch.nn.Conv2d(3, 16, 3).cuda()
        ran.append(f"conv: {tuple(conv(torch.randn(4, 3, 32, 32, device='cuda')).shape)}")
        torch.cuda.synchronize()
        return ran

    torch.zeros(1, device="cuda")
    base = inside.ledger_used()
    ran = libraries()
    grown, first_gap = inside.ledger_used() - base, gap()
    reserved = torch.cuda.memory_reserved()
    libraries()                                   # again: the same modules, nothing new
    try:
        big = torch.empty(3 << 30, dtype=torch.uint8, device="cuda")
        a = torch.randn(16384, 16384, device="cuda")     # 1 GiB; its product another
        a @ a
        error = "none"
    except torch.OutOfMemoryError as exc:
        error = str(exc)
    inside.report(ran=ran, cudnn=torch.backends.cudnn.version(), grown=grown, reserved=reserved,
                  first_gap=first_gap, gap=gap(), error=error)
"""


def test_torch_libraries_run_and_are_charged(run_real: Runner) -> None:
    require("torch")
    result = run_real(LIBRARIES)
    assert len(result["ran"]) == 7, result["ran"]
    assert result["cudnn"] >= 90000, result  # cuDNN 9, torch's nvidia-cudnn wheel
    # cuBLAS's and cuDNN's workspaces come from torch's allocator: charged as it reserves them.
    assert result["grown"] >= result["reserved"] - 2 * MiB, result
    # Beyond the ledger: the rounding of module globals only, loaded once; running again adds
    # nothing.
    assert 0 <= result["first_gap"] <= MODULE_GLOBALS, result
    assert result["gap"] == result["first_gap"], result
    # The product does not fit beside 3 GiB: stopped at the slice, not at the 24 GiB GPU.
    assert "Tried to allocate" in result["error"], result["error"]
    assert f"total capacity of {SLICE >> 30}.00 GiB" in result["error"], result["error"]


def test_eager_module_loading_runs_the_libraries_under_the_slice(run_real: Runner) -> None:
    """CUDA_MODULE_LOADING=EAGER: libcudart loads every kernel's library at start-up, on the
    main thread (once failed at torch's start on the simulator: cudaGetDeviceCount, error 201)."""
    require("torch")
    result = run_real(
        """
        import torch, inside
        a = torch.randn(256, 256, device="cuda", dtype=torch.float16)
        conv = torch.nn.Conv2d(3, 8, 3).cuda()
        y = conv(torch.randn(2, 3, 16, 16, device="cuda"))
        x = torch.randn(8, 8, device="cuda", requires_grad=True)
        (x * 2).sum().backward()
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        inside.report(shapes=[list((a @ a).shape), list(y.shape), list(x.grad.shape)],
                      total=total, used=inside.ledger_used())
        import os
        os._exit(0)  # past PyTorch's exit race after a backward (pytorch/pytorch#190489)
        """,
        env={"CUDA_MODULE_LOADING": "EAGER"},
    )
    assert result["shapes"] == [[256, 256], [2, 8, 14, 14], [8, 8]], result
    assert result["total"] == SLICE, result  # the slice, not the GPU
    assert result["used"] > 0, result


def test_cuda_graphs_capture_and_replay(run_real: Runner) -> None:
    """torch.cuda.graph capture and replay, make_graphed_callables; the graph's private pool
    is torch's own memory, charged as the pool reserves it."""
    require("torch")
    result = run_real("""
        import os, torch, inside, rt
        lin = torch.nn.Linear(256, 256).cuda()
        x = torch.randn(64, 256, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                lin(x)
        torch.cuda.current_stream().wait_stream(side)
        before = inside.ledger_used()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = torch.relu(lin(x))
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        captured = inside.ledger_used() - before
        graphed = torch.nn.Linear(256, 256).cuda()
        step = torch.cuda.make_graphed_callables(graphed, (torch.randn(64, 256, device="cuda",
                                                                       requires_grad=True),))
        step(torch.randn(64, 256, device="cuda", requires_grad=True)).sum().backward()
        torch.cuda.synchronize()
        inside.report(shape=list(y.shape), grad=list(graphed.weight.grad.shape),
                      captured=captured, pool=torch.cuda.memory_reserved(),
                      gap=rt.driver_used(os.getpid()) - inside.ledger_used())
    """)
    assert result["shape"] == [64, 256] and result["grad"] == [256, 256], result
    assert 0 < result["captured"] <= result["pool"], result
    assert 0 <= result["gap"] <= MODULE_GLOBALS, result


def test_torch_compile_runs_triton_kernels(run_real: Runner, tmp_path: Path) -> None:
    """Inductor generates Triton kernels, Triton compiles them (ptxas) and launches them through
    the simulator's libcuda, which `cgpu run` names to Triton (TRITON_LIBCUDA_PATH)."""
    require("torch")
    cache = tmp_path / "triton"
    result = run_real(
        """
        import os, torch, inside

        @torch.compile
        def fused(x, y):
            return torch.relu(x * y + 1).sum(dim=-1)

        x = torch.randn(64, 128, device="cuda")
        out = fused(x, x)
        torch.cuda.synchronize()
        inside.report(shape=list(out.shape), libcuda=os.environ.get("TRITON_LIBCUDA_PATH", ""))
        """,
        env={"TRITON_CACHE_DIR": str(cache), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")},
    )
    assert result["shape"] == [64], result
    assert result["libcuda"].endswith("/sim"), result
    assert list(cache.rglob("*.cubin")), "Triton compiled no kernel"


def test_first_launches_on_threads_that_made_no_context_current(run_real: Runner) -> None:
    """With CUDA's lazy loading, a kernel's library is loaded at its first launch, on whatever
    thread launches it: a plain Python thread, or autograd's engine thread in a backward pass
    (nn.MultiheadAttention's). cuLibraryLoadData needs no current context there; the simulator
    asked for one and every such launch failed with 'invalid device context'."""
    require("torch")
    result = run_real("""
        import os, threading, torch, inside
        torch.zeros(1, device="cuda")
        x = torch.randn(4, 8, 128, 128, device="cuda")
        errors = []

        def first_division():
            try:
                (x / 7).sum()
                torch.cuda.synchronize()
            except Exception as exc:
                errors.append(repr(exc))

        thread = threading.Thread(target=first_division)
        thread.start()
        thread.join()
        mha = torch.nn.MultiheadAttention(64, 4, batch_first=True).cuda()
        q = torch.randn(2, 16, 64, device="cuda", requires_grad=True)
        out, weights = mha(q, q, q, need_weights=True)
        (out.sum() + weights.sum()).backward()
        torch.cuda.synchronize()
        inside.report(errors=errors, grad=list(q.grad.shape))
        # PyTorch's autograd device thread can drop its last GraphTask reference while the
        # interpreter finalizes and abort the process ("terminate called without an active
        # exception", pytorch/pytorch#190489; docs/clients.md), with or without the shim.
        # What is checked is the work above.
        os._exit(0)
    """)
    assert result["errors"] == [], result
    assert result["grad"] == [2, 16, 64], result
