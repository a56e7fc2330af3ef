"""Simulated device memory: contexts, allocations, VMM, pools, arrays, threads and fork."""

from __future__ import annotations

from pathlib import Path

from simkit import GiB, KiB, MiB, json_out


def test_contexts_per_thread(run) -> None:
    assert run("contexts").stdout.strip() == "ok"


def test_alloc_free_reuse_oom(run) -> None:
    r = json_out(run("alloc", memory="1GiB"))
    assert r["total"] == GiB and r["free0"] == GiB
    assert r["free0"] - r["after1"] == 2 * MiB  # 1 byte takes the 2 MiB granule
    assert r["after1"] - r["after3m"] == 4 * MiB
    assert r["premanaged"] - r["managed"] == 6 * MiB  # managed memory is charged too
    assert r["v1"] == 2 * MiB  # legacy cuMemAlloc (32-bit)
    assert r["blocks"] == GiB // (64 * MiB) and r["left"] == 0


def test_granularity_and_other_tenants(run) -> None:
    r = json_out(run("alloc", memory="1GiB", granularity="64KiB", other_used="256MiB"))
    assert r["free0"] == GiB - 256 * MiB
    assert r["free0"] - r["after1"] == 64 * KiB
    assert r["after1"] - r["after3m"] == 3 * MiB
    assert r["premanaged"] - r["managed"] == 5 * MiB
    assert r["v1"] == MiB
    assert r["blocks"] == (GiB - 256 * MiB) // (64 * MiB)


def test_context_overhead_and_ownership(run) -> None:
    r = json_out(run("ctxmem", memory="4GiB", ctx_overhead="300MiB"))
    assert r["total"] == 4 * GiB
    assert r["one"] == 4 * GiB - 300 * MiB  # first context on the device
    assert r["two"] == r["one"]  # charged once per process
    assert r["with"] == r["two"] - 10 * MiB
    assert r["after"] == r["one"]  # destroying c2 freed its memory
    assert r["prim"] == r["one"]
    assert r["reset"] == r["one"]  # reset freed the allocation


def test_vmm(run) -> None:
    r = json_out(run("vmm", devices=2, memory="1GiB"))
    gran = r["gran"]
    assert r["free0"] == GiB  # device 0 untouched
    assert r["free1"] == GiB - 4 * gran  # charged to prop->location.id
    assert r["mapped"] == r["free1"]  # released but mapped: still held
    assert r["unmapped"] == GiB


def test_stream_ordered_pools_and_arrays(run) -> None:
    assert run("async").stdout.strip() == "ok"


def test_threads(run) -> None:
    assert run("threads", memory="80GiB").stdout.strip() == "ok"


def test_fork(run, tmp_path: Path) -> None:
    out = run("fork", memory="1GiB", state=tmp_path / "state").stdout.split()
    # The child sees the parent's 10 MiB and its own 20 MiB; after it exits only the
    # parent's remain.
    assert out == ["child", str(GiB - 30 * MiB), "parent", str(GiB - 10 * MiB)]
    out = run("fork", memory="1GiB").stdout.split()  # no state file: per process
    assert out == ["child", str(GiB - 20 * MiB), "parent", str(GiB - 10 * MiB)]
