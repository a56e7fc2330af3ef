"""vLLM with its defaults (torch.compile and CUDA graphs on) under `cgpu run --gpu-mem 2GiB` on a
5 GiB simulated GPU: it compiles, captures its graphs, sizes its KV cache from the slice and
serves. Triton's kernels are built for the simulated H100 and launched there (computing
nothing); the graphs are captured and replayed by the simulator.
"""

from __future__ import annotations

from pathlib import Path

from vllmkit import READY_S, REQUESTED, SIM_MEMORY, SLICE, GiB, Server, Simulated, assert_serves


def test_defaults_compile_capture_graphs_and_serve(vllm_model: Path, tmp_path: Path) -> None:
    gpu = Simulated(tmp_path, SIM_MEMORY)
    server = Server(gpu, "defaults", vllm_model, "2GiB")
    try:
        assert server.start().wait_ready(READY_S), server.tail()
        log = server.log
        assert "torch.compile took" in log, server.tail()
        assert "Graph capturing finished" in log, server.tail()
        # The KV cache: gpu_memory_utilization x the slice, less the model, the activations
        # and what vLLM sets aside for the CUDA graphs.
        kv = server.kv_cache_gib() * GiB
        assert REQUESTED - 0.5 * GiB < kv <= REQUESTED, (kv / GiB, server.tail())
        used = server.ledger_used()
        assert REQUESTED - 0.3 * GiB < used <= SLICE, (used / GiB, server.tail())
        assert_serves(server)
    finally:
        server.stop()
