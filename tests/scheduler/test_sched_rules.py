"""The placement rules as pure functions: quantities, node capacity, GPU choice, scores."""

from __future__ import annotations

import pytest

from cgpu.inspect.tabwriter import tabulate
from cgpu.scheduler.fit import NodeView, check, place, score
from cgpu.scheduler.podspec import GpuRequest, SpecError, node_gpus, quantity
from cgpu.scheduler.state import ClusterState, Holding


def test_quantities_are_whole_numbers_or_refused() -> None:
    assert quantity("4", "x") == 4
    assert quantity("2k", "x") == 2000
    assert quantity("1Ki", "x") == 1024
    assert quantity("1e3", "x") == 1000  # Kubernetes' exponent notation
    for bad in ("2.5", "-1", "four", "", "5m"):
        with pytest.raises(SpecError):
            quantity(bad, "x")


def test_node_capacity_prefers_allocatable_and_fails_closed() -> None:
    node = {"status": {"capacity": {"aliyun.com/gpu-mem": "32", "aliyun.com/gpu-count": "2"},
                       "allocatable": {"aliyun.com/gpu-mem": "30"}}}  # fmt: skip
    gpus = node_gpus(node)
    assert (gpus.count, gpus.per_gpu, gpus.error) == (2, 15, None)
    assert node_gpus({"status": {}}).error == "node advertises no aliyun.com/gpu-mem"
    broken = {"status": {"allocatable": {"aliyun.com/gpu-mem": "8", "aliyun.com/gpu-count": "0"}}}
    assert node_gpus(broken).error


def test_binpack_and_spread_choose_different_gpus() -> None:
    view = NodeView(8, (3, 8, 5, 5))
    one = GpuRequest(3, 1)
    assert place(view, one, "binpack").gpus == (0,)
    assert place(view, one, "spread").gpus == (1,)
    two = GpuRequest(8, 2)
    assert place(view, two, "binpack").gpus == (2, 3)
    assert place(view, two, "spread").gpus == (1, 2)
    assert check(view, GpuRequest(6, 1)).fits
    assert not check(view, GpuRequest(9, 1)).fits


def test_unplaced_units_count_against_the_node() -> None:
    view = NodeView(8, (8, 8), unplaced=10)
    verdict = check(view, GpuRequest(8, 1))
    assert not verdict.fits and "without a GPU index hold 10 units" in verdict.reason
    assert check(view, GpuRequest(6, 1)).fits


def test_scores_stay_within_zero_to_ten() -> None:
    full, empty = NodeView(8, (1, 2)), NodeView(8, (8, 8))
    request = GpuRequest(1, 1)
    assert score(full, request, "binpack") == 9 and score(empty, request, "binpack") == 1
    assert score(full, request, "spread") == 1 and score(empty, request, "spread") == 9
    assert score(NodeView(0, (), error="x"), request, "binpack") == 0


def test_assumptions_expire_but_not_while_a_bind_is_in_flight() -> None:
    state = ClusterState()
    state.observe_node({"metadata": {"name": "n"},
                        "status": {"allocatable": {"aliyun.com/gpu-mem": "8"}}})  # fmt: skip
    node = state.nodes["n"]
    with node.lock:
        state.assume("n", "uid-1", Holding("d", "p", (0,), 5), timeout=0.0)
    assert node.view.free == (3,)
    assert state.expire() == 0  # still talking to the API server
    state.settle("n", "uid-1", bound=True, timeout=0.0)
    assert state.expire() == 1
    assert node.view.free == (8,)


def test_tabwriter_aligns_column_blocks_like_go() -> None:
    text = "a\tbb\tc\t\nlonger\tx\t\nno tabs here\nz\tq\t\n"
    assert tabulate(text) == "a       bb  c\nlonger  x\nno tabs here\nz  q\n"
