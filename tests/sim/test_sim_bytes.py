"""Simulated device memory has contents: copies and sets move bytes, lazily backed."""

from __future__ import annotations

import pytest
from simkit import GiB, MiB, json_out


@pytest.mark.parametrize(
    "command",
    [
        "copies",  # every 1-D family: sync, _ptds, async, _ptsz, peer, legacy, arrays
        "pitched",  # 2-D, 2-D unaligned, 3-D, 3-D peer, arrays, sync and async
        "memset",  # D8/D16/D32, D2D8/16/32 and their async forms
        "vmm",  # two mappings of one handle share bytes; copies across handles
        "vmmshare",  # a handle exported as a file descriptor maps the same bytes elsewhere
        "order",  # async copies and sets run in stream order, behind kernels
        "host",  # pinned host memory and pointer attributes
        "errors",  # bad pointers and ranges are refused; the host faults on device memory
        "ipc",  # a process that opens an IPC handle sees and writes the exporter's bytes
        "threads",  # six threads copying on their own streams keep their own bytes
    ],
)
def test_memory_contents(run_bytes, command: str) -> None:
    assert run_bytes(command, memory="16GiB").stdout.strip() == "ok"


def test_lazy_backing_costs_pages_touched(run_bytes) -> None:
    """60 GiB on an 80 GiB GPU: only the 64 MiB written take memory, and come back when freed."""
    touch = 64 * MiB
    r = json_out(run_bytes("lazy", str(60 * GiB), str(touch), memory="80GiB"))
    kib = 1024
    slack = 16 * MiB // kib  # the interpreter-free probe's own pages move a little
    assert r["allocated"] - r["start"] < slack  # allocating costs nothing
    for touched, freed in (
        ("touched", "freed"),
        ("managed_touched", "managed_freed"),
        ("vmm_touched", "vmm_released"),
    ):
        grown = r[touched] - r["start"]
        # (RSS counters may lag by a few pages: 1 MiB of tolerance below.)
        assert touch // kib - 1024 <= grown < touch // kib + slack, (touched, r)
        assert r[freed] - r["start"] < slack, (freed, r)


def test_allocation_beyond_the_device_fails(run_bytes) -> None:
    """Backing changes nothing in what the device reports: 81 GiB do not fit in 80."""
    proc = run_bytes("lazy", str(81 * GiB), str(MiB), memory="80GiB", check=False)
    assert proc.returncode != 0 and "cuMemAlloc" in proc.stderr and "-> 2" in proc.stderr
