"""vLLM (the pinned release, in .venv-vllm) under `cgpu run --gpu-mem` on the simulated GPU.

A tiny Llama made here from a config (no download, `--load-format dummy`) on a simulated GPU of
5 GiB, each server in a 2 GiB slice. vLLM sizes its KV cache from the slice
(gpu_memory_utilization x slice, not x the GPU), serves completions over its OpenAI-compatible
HTTP API, two servers in two containers share the GPU, a third that does not fit stops with
vLLM's own error while the two keep serving, and sleep mode gives memory back to the slice and
wake-up takes it again. Kernels compute nothing on the simulator: the tokens are garbage, the
memory and the serving are real.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from vllmkit import (
    READY_S,
    REQUESTED,
    SIM_MEMORY,
    SLICE,
    GiB,
    Server,
    Simulated,
    assert_serves,
)


def assert_kv_cache_from_slice(server: Server) -> None:
    """vLLM's KV cache comes out of gpu_memory_utilization x the slice: the whole of that,
    less the model, activations and workspaces (a few hundred MiB for this model), and the
    container's ledger holds about that much, within the slice."""
    kv = server.kv_cache_gib() * GiB
    assert REQUESTED - 0.5 * GiB < kv <= REQUESTED, (kv / GiB, server.tail())
    used = server.ledger_used()
    assert REQUESTED - 0.2 * GiB < used <= SLICE, (used / GiB, server.tail())


Pair = tuple[Server, Server, Simulated]


@pytest.fixture(scope="module")
def pair(vllm_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """Two eager servers (the first with sleep mode) in two 2 GiB containers on a 5 GiB GPU."""
    gpu = Simulated(tmp_path_factory.mktemp("gpu"), SIM_MEMORY)
    eager = ["--enforce-eager"]
    first = Server(gpu, "first", vllm_model, "2GiB", [*eager, "--enable-sleep-mode"])
    second = Server(gpu, "second", vllm_model, "2GiB", eager)
    try:
        # One after the other: their profiling must not see each other's allocations move.
        for server in (first, second):
            assert server.start().wait_ready(READY_S), f"{server.name}:\n{server.tail()}"
        yield first, second, gpu
    finally:
        for server in (first, second):
            server.stop()


class TestTwoServersEager:
    """Two eager servers in two containers on one simulated GPU."""

    def test_kv_cache_is_sized_from_the_slice(self, pair: Pair) -> None:
        first, second, _ = pair
        assert_kv_cache_from_slice(first)
        assert_kv_cache_from_slice(second)

    def test_both_serve_completions(self, pair: Pair) -> None:
        first, second, _ = pair
        assert first.get("/v1/models")["data"][0]["id"] == "tiny"
        assert_serves(first)
        assert_serves(second)

    def test_a_third_that_does_not_fit_fails_with_vllms_error(
        self, pair: Pair, vllm_model: Path
    ) -> None:
        first, second, gpu = pair
        third = Server(gpu, "third", vllm_model, "2GiB", ["--enforce-eager"])
        try:
            assert not third.start().wait_ready(READY_S), "a third 2 GiB server started on 5 GiB"
            assert third.wait_exit(60) != 0
        finally:
            third.stop()
        # vLLM's own check: what the slice leaves free (min of the slice and the GPU) is less
        # than gpu_memory_utilization x the slice.
        assert "is less than desired GPU memory utilization" in third.log, third.tail()
        assert "(0.92, 1.84 GiB)" in third.log, third.tail()
        assert_serves(first)
        assert_serves(second)

    def test_sleep_gives_memory_back_and_wake_up_takes_it(self, pair: Pair) -> None:
        first, _, _ = pair
        awake = first.ledger_used()
        first.post("/sleep?level=1")
        assert first.get("/is_sleeping")["is_sleeping"] is True
        asleep = first.ledger_used()
        # Level 1 discards the KV cache and moves the weights to the host: nearly all of it.
        assert asleep < awake - 1.2 * GiB, (awake / GiB, asleep / GiB)
        first.post("/wake_up")
        assert first.get("/is_sleeping")["is_sleeping"] is False
        woken = first.ledger_used()
        assert awake - 0.1 * GiB <= woken <= SLICE, (awake / GiB, woken / GiB)
        assert_serves(first)
