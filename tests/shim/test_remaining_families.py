"""The families of device memory beyond plain allocations: each is charged when the driver
reserves it, agrees with NVML's per-process figure, stops at the slice, and is given back.

Each test runs tests/shim/family_client.py on the simulator under the shim.  `usage` lines
carry what the process holds by the shim's account (the slice less what cuMemGetInfo calls
free) and by NVML's per-process figure.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from probe_result import Result, pages, usages

from cgpu.core.ledger import read_ledger

MiB = 1 << 20
CLIENT = Path(__file__).with_name("family_client.py")
# The simulated H100: 132 SMs of 2048 resident threads each.
RESIDENT_THREADS = 132 * 2048


def test_context_heaps_are_charged_as_the_driver_reserves_them(client):
    """cuCtxSetLimit: the stack is reserved for every resident thread, the heap and the
    FIFO for their size; a size over the slice is refused and the old one stays."""
    stack = pages(2048 * RESIDENT_THREADS) - pages(1024 * RESIDENT_THREADS)
    heap = pages(200 * MiB) - 8 * MiB
    r = client(
        "1GiB",
        "init", "usage",
        "setlimit", "stack", 2048, "usage",
        "setlimit", "heap", 200 * MiB, "usage",
        "setlimit", "printf", 64 * MiB, "usage",
        "setlimit", "stack", 16384, "getlimit", "stack", "usage",  # 3.2 GiB of stack: over
        "setlimit", "stack", 1024, "setlimit", "heap", 8 * MiB, "setlimit", "printf", MiB, "usage",
    )  # fmt: skip
    assert [line[0] for line in r.lines("setlimit")] == ["0", "0", "0", "2", "0", "0", "0"]
    assert r.one("getlimit") == ["0", "2048"]
    fifo = 64 * MiB - 2 * MiB
    assert usages(r) == [
        (0, 0),
        (stack, stack),
        (stack + heap, stack + heap),
        (stack + heap + fifo, stack + heap + fifo),
        (stack + heap + fifo, stack + heap + fifo),  # the refused size changed nothing
        (0, 0),  # back to the defaults: given back
    ]
    assert "out of GPU memory slice" in r.stderr


LOCAL = Path(__file__).with_name("data") / "local_sm90.cubin"
# big_stack's threads need 8000 bytes of stack each (data/local.cu): its first launch grows the
# stack of every resident thread of the simulated H100 from the default 1 KiB, 1800 MiB more.
GROWN = pages(8000 * RESIDENT_THREADS) - pages(1024 * RESIDENT_THREADS)


def test_the_stack_a_launch_grows_is_charged(client):
    """The driver grows the per-thread stack at the launch of a kernel that needs more, and
    keeps it (cuda.h, CU_LIMIT_STACK_SIZE). The shim charges the growth once the program asks
    what is free, and it goes with the context."""
    r = client(
        "4GiB",
        "init", "module-load", LOCAL, "launch", "no_stack", "usage",
        "launch", "big_stack", "getlimit", "stack", "usage",
        "launch", "big_stack", "usage", "reset", "usage",
    )  # fmt: skip
    assert r.lines("launch") == [["0"], ["0"], ["0"]]
    assert r.one("getlimit") == ["0", "8000"]
    assert usages(r) == [(0, 0), (GROWN, GROWN), (GROWN, GROWN), (0, 0)]


def test_an_allocation_after_a_grown_stack_is_held_to_the_slice(client):
    """The growth is counted when an allocation would pass the slice by the shim's account, or
    when the program asks what is free, whichever comes first (the allocation path itself asks
    the driver nothing). In a 3 GiB slice: 1 GiB and 1.5 GiB pass by the account, the stack
    uncounted (the known limit: an allocation may pass the slice by the growth until then); the
    next 1 GiB finds the slice full and counts the stack, and so does what is free."""
    r = client(
        "3GiB",
        "init", "module-load", LOCAL, "launch", "big_stack",
        "alloc", 1024 * MiB, "alloc", 1536 * MiB, "ledger", "alloc", 1024 * MiB, "ledger",
        "usage", "alloc", MiB,
    )  # fmt: skip
    assert [line[0] for line in r.lines("alloc")] == ["0", "0", "2", "2"]
    held = GROWN + 2560 * MiB  # past the 3 GiB slice: what the driver holds
    assert r.lines("ledger") == [["0", str(2560 * MiB)], ["0", str(held)]]
    assert usages(r) == [(3 << 30, held)]  # nothing free: the slice is full


def test_a_launch_that_grows_the_stack_past_the_slice_is_seen_not_stopped(client):
    """The known limit: the launch is the driver's, and the shim does not stand in it, so a
    1 GiB slice's process grows its stack by 1800 MiB. The charge shows it (a host view flags
    the container: NVML's figure above the slice), and nothing more is allocated."""
    r = client("1GiB", "init", "module-load", LOCAL, "launch", "big_stack", "usage", "ledger",
               "alloc", MiB)  # fmt: skip
    assert r.one("launch") == ["0"]
    assert usages(r) == [(1 << 30, GROWN)]  # nothing free in the slice; the driver holds more
    assert r.one("ledger") == ["0", str(GROWN)]
    assert r.one("alloc")[0] == "2"


def test_heaps_die_with_their_context(client):
    """A reset context starts again from the default sizes: what the heaps took is given back."""
    r = client(
        "1GiB", "init", "setlimit", "heap", 300 * MiB, "usage", "reset", "usage", "getlimit", "heap"
    )
    assert usages(r) == [(pages(300 * MiB) - 8 * MiB,) * 2, (0, 0)]
    assert r.one("reset") == ["0"] and r.one("getlimit") == ["0", str(8 * MiB)]


def test_graph_memory_is_charged_at_instantiation_and_given_back_by_trim(client):
    """Graph memory nodes: the footprint is charged when the graph is instantiated (before the
    driver maps it at launch); the driver's pool keeps it after the executable graph is
    destroyed, and so does the charge, until cuDeviceGraphMemTrim."""
    foot = pages(300_000_000) + pages(100_000_000)
    r = client(
        "1GiB",
        "init",
        "graph-alloc", 300_000_000, "graph-alloc", 100_000_000,
        "graph-instantiate", "usage",
        "graph-launch", "graph-reserved", "usage",
        "graph-exec-destroy", "usage",
        "graph-instantiate", "graph-launch", "usage",  # the pool's memory serves it again
        "graph-exec-destroy", "graph-trim", "usage",
        "graph-destroy",
    )  # fmt: skip
    assert [line[0] for line in r.lines("graph-instantiate")] == ["0", "0"]
    assert r.one("graph-reserved") == ["0", str(foot)]
    assert usages(r) == [
        (foot, 0),  # charged ahead of the launch that maps it
        (foot, foot),
        (foot, foot),  # destroyed: still reserved by the pool
        (foot, foot),
        (0, 0),  # trimmed
    ]


def test_a_captured_stream_ordered_allocation_is_graph_memory(client):
    """cudaMallocAsync in a captured region allocates nothing: it adds an allocation node,
    charged with the graph when it is instantiated, not when it is captured."""
    foot = pages(100_000_000) + pages(50_000_000)
    r = client(
        "1GiB",
        "init", "capture-begin",
        "capture-alloc", 100_000_000, "capture-alloc", 50_000_000, "capture-free", "usage",
        "capture-end", "graph-instantiate", "usage", "graph-launch", "usage",
        "graph-exec-destroy", "graph-trim", "usage",
    )  # fmt: skip
    assert [line[0] for line in r.lines("capture-alloc")] == ["0", "0"]
    assert r.one("capture-end") == ["0"] and r.one("graph-launch") == ["0"]
    assert usages(r) == [(0, 0), (foot, 0), (foot, foot), (0, 0)]


def test_a_graph_over_the_slice_is_not_instantiated(client, ledger_dir):
    r = client(
        "1GiB",
        "init", "alloc", 512 * MiB,
        "graph-alloc", 600 * MiB, "graph-instantiate", "usage",
        "free", "graph-instantiate", "graph-launch", "usage",
    )  # fmt: skip
    assert [line[0] for line in r.lines("graph-instantiate")] == ["2", "0"]
    assert r.one("graph-launch") == ["0"]
    assert usages(r) == [(512 * MiB, 512 * MiB), (600 * MiB, 600 * MiB)]
    assert "out of GPU memory slice" in r.stderr
    assert read_ledger(ledger_dir / "cgpu.ledger").devices[0].used == 0


def test_created_pools_are_charged_and_given_back_by_trim_and_destroy(client):
    """A pool made with cuMemPoolCreate keeps what is freed into it (its release threshold
    here keeps all): charged until trimmed or destroyed, and it cannot grow past the slice."""
    r = client(
        "1GiB",
        "init", "pool-create",
        "pool-alloc", 300 * MiB, "pool-alloc", 300 * MiB, "pool-alloc", 600 * MiB, "usage",
        "pool-free-all", "usage",
        "pool-trim", "usage",
        "pool-alloc", 500 * MiB, "pool-free-all", "usage",
        "pool-destroy", "usage",
    )  # fmt: skip
    assert [line[0] for line in r.lines("pool-alloc")] == ["0", "0", "2", "0"]
    assert usages(r) == [
        (600 * MiB, 600 * MiB),
        (600 * MiB, 600 * MiB),  # freed into the pool: kept
        (0, 0),  # trimmed
        (500 * MiB, 500 * MiB),
        (0, 0),  # destroyed
    ]


def test_ipc_imports_are_charged_to_the_importer_while_open(shim_env, ledger_dir, tmp_path):
    """The exporter holds the memory (NVML shows it there); the importer is charged too while it
    holds the import open, so a pair cannot hold more than the slice by freeing exported memory
    (docs/contract.md, IPC).  An import that does not fit is refused."""
    exporter_env = shim_env({"CGPU_MEM_LIMIT": "4GiB"})
    exporter_env["CGPU_LEDGER_DIR"] = str(tmp_path / "exporter")
    (tmp_path / "exporter").mkdir()
    exporter = subprocess.Popen(
        [
            sys.executable,
            "-P",
            str(CLIENT),
            "init",
            "alloc",
            str(400 * MiB),
            "export",
            "wait",
            "usage",
        ],
        env=exporter_env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert exporter.stdout.readline().split() == ["init", "0"]
        assert exporter.stdout.readline().split() == ["alloc", "0"]
        rc, handle = exporter.stdout.readline().split()[1:]
        assert rc == "0"
        assert exporter.stdout.readline().split() == ["ready", "0"]
        importer = subprocess.run(
            [sys.executable, "-P", str(CLIENT), "init", "usage", "import", handle, "usage",
             "close", "usage", "alloc", str(700 * MiB), "import", handle, "usage"],
            env=shim_env({"CGPU_MEM_LIMIT": "1GiB"}),
            capture_output=True,
            text=True,
            timeout=120,
        )  # fmt: skip
        assert importer.returncode == 0, importer.stderr
        r = Result(0, importer.stdout, importer.stderr)
        assert [line[0] for line in r.lines("import")] == ["0", "2"]
        assert r.one("close") == ["0"]
        # NVML: the memory is the exporter's; the slice: the importer pays while it holds it.
        assert usages(r) == [(0, 0), (400 * MiB, 0), (0, 0), (700 * MiB, 700 * MiB)]
        assert read_ledger(ledger_dir / "cgpu.ledger").devices[0].used == 0
        exporter.stdin.write("\n")
        exporter.stdin.close()
        assert exporter.stdout.readline().split() == ["usage", "0", str(400 * MiB), str(400 * MiB)]
        assert exporter.wait(60) == 0
    finally:
        exporter.kill()
        exporter.wait(60)


CUBIN = Path(__file__).with_name("data") / "globals_sm90.cubin"
# Its globals (data/globals.cu): 64 MiB zero-filled, 16 bytes initialised, 1 KiB and 16
# bytes of constants, laid out with their alignments.
GLOBALS = pages(64 * MiB + 1056)


def test_module_globals_are_charged_at_load_and_given_back(client):
    """A cubin's globals are allocated when it loads (cuModuleLoad from a file,
    cuModuleLoadData from memory, cuLibraryLoadFromFile), freed at unload or with the
    module's context; the shim reads their size from the image's sections."""
    r = client(
        "1GiB",
        "init",
        "module-load", CUBIN, "usage", "module-global", "big",
        "module-load-data", CUBIN, "usage",
        "module-unload", "module-unload", "usage",
        "library-load", CUBIN, "usage", "library-global", "big", "library-unload", "usage",
        "module-load", CUBIN, "reset", "usage",
    )  # fmt: skip
    assert r.one("module-global") == ["0", str(64 * MiB)]
    assert r.one("library-global") == ["0", str(64 * MiB)]
    assert usages(r) == [
        (GLOBALS, GLOBALS),
        (2 * GLOBALS, 2 * GLOBALS),
        (0, 0),
        (GLOBALS, GLOBALS),
        (0, 0),
        (0, 0),  # died with its context
    ]


def test_a_module_whose_globals_do_not_fit_is_refused(client):
    r = client(
        "128MiB",
        "init", "module-load", CUBIN, "module-load-data", CUBIN, "library-load", CUBIN, "usage",
    )  # fmt: skip
    assert r.one("module-load") == ["0"]
    assert r.one("module-load-data") == ["2"] and r.one("library-load") == ["2"]
    assert usages(r) == [(GLOBALS, GLOBALS)]
    assert "out of GPU memory slice" in r.stderr


DATA = CUBIN.parent


@pytest.mark.parametrize(
    "name", ["globals_sm90.fatbin", "globals_sm90_lz4.fatbin", "globals_sm90_zstd.fatbin"]
)
def test_fatbin_globals_are_charged_from_the_cubin_the_driver_loads(client, name):
    """A fatbin's globals are those of the cubin the driver loads for the device, stored plain,
    LZ4-compressed (CUDA 11 and 12) or zstd-compressed (CUDA 13's libraries): charged at load,
    from a file, from memory, and from the wrapper libcudart hands to cuLibraryLoadData (every
    kernel PyTorch launches comes so); the driver's own per-process figure agrees."""
    fatbin = DATA / name
    r = client(
        "1GiB",
        "init",
        "module-load", fatbin, "usage", "module-unload", "usage",
        "module-load-data", fatbin, "usage", "module-unload",
        "library-load-wrapped", fatbin, "usage", "library-global", "big", "library-unload",
        "usage",
    )  # fmt: skip
    assert r.one("module-load") == ["0"] and r.one("library-load-wrapped") == ["0"]
    assert r.one("library-global") == ["0", str(64 * MiB)]
    assert usages(r) == [(GLOBALS, GLOBALS), (0, 0), (GLOBALS, GLOBALS), (GLOBALS, GLOBALS), (0, 0)]


def test_a_fatbin_is_charged_for_the_device_s_cubin_not_another(client):
    """One source built for sm_80, sm_90 and sm_100 declares 32, 64 and 16 MiB: on the sm_90
    device the driver loads the sm_90 cubin, and the shim charges its 64 MiB (not the first
    entry's, nor the largest's, nor the newest's)."""
    fatbin = DATA / "globals_by_arch.fatbin"
    r = client("1GiB", "init", "module-load", fatbin, "usage", "module-global", "big")
    assert r.one("module-global") == ["0", str(64 * MiB)]
    sm90 = pages(64 * MiB + 1)  # its 64 MiB and a few bytes the compiler adds, in whole pages
    assert usages(r) == [(sm90, sm90)]


def test_damaged_fatbins_neither_crash_nor_skew_the_account(client, tmp_path):
    """Fatbins cut short, with entry headers that lie about their sizes, or with their LZ4 and
    zstd payloads damaged byte by byte: every load returns (whatever the driver answers), and
    what the shim charged is what the driver holds (it reads the same bytes the same way), so
    the account ends where it started. Run under ASan and TSan too (scripts/test.sh)."""
    rng = random.Random(25)
    steps: list[object] = ["init"]
    for name in ("globals_sm90_lz4.fatbin", "globals_sm90_zstd.fatbin", "globals_by_arch.fatbin"):
        good = (DATA / name).read_bytes()
        # Cut short: from a file, whose length the loader knows (an image in memory has only
        # its header's word for its length, for the driver as for the shim).
        variants = [("module-load", good[:cut]) for cut in (8, 16, 40, 80, len(good) // 2)]
        for field in (4, 8, 56):  # an entry's header size, payload size, uncompressed size
            bad = bytearray(good)
            bad[16 + field : 16 + field + 4] = rng.randbytes(4)
            variants.append(("module-load-data", bytes(bad)))
        for _ in range(12):
            bad = bytearray(good)
            for at in rng.sample(range(80, len(good)), 3):  # within the first entry's payload on
                bad[at] = rng.randrange(256)
            variants.append(("module-load-data", bytes(bad)))
        for i, (step, data) in enumerate(variants):
            path = tmp_path / f"{name}.{i}"
            path.write_bytes(data)
            steps += [step, path, "usage"]
    r = client("8GiB", *steps, "reset", "usage")
    loads = r.lines("module-load") + r.lines("module-load-data")
    assert len(loads) == len(steps) // 3
    assert ["0"] in loads and ["200"] in loads  # some still load, some are refused as invalid
    assert ["2"] not in loads  # none runs out of the slice
    assert all(shim == host for shim, host in usages(r)), usages(r)
    assert usages(r)[-1] == (0, 0)


@pytest.mark.parametrize("slot", ["1", "6", "8"])
@pytest.mark.parametrize("name", ["globals_sm90_lz4.fatbin", "globals_ptx80_zstd.fatbin"])
def test_modules_the_cuda_12_runtime_loads_are_charged(client, slot, name):
    """libcudart 12 loads its kernels' modules through the driver's private runtime table
    (cuGetExportTable): slot 1 and 6 with a fatbin wrapper, 8 with the fatbin. The shim hands
    out a copy whose loaders charge the globals as cuModuleLoadData does (a cubin's, or the PTX
    the driver compiles), and the module's unload gives them back."""
    r = client(
        "1GiB",
        "init", "runtime-load", slot, DATA / name, "usage", "module-global", "big",
        "module-unload", "usage",
    )  # fmt: skip
    assert r.one("runtime-load") == ["0"]
    assert r.one("module-global") == ["0", str(64 * MiB)]
    assert usages(r) == [(GLOBALS, GLOBALS), (0, 0)]


@pytest.mark.parametrize("slot", ["1", "6", "8"])
def test_a_runtime_module_whose_globals_do_not_fit_is_refused(client, slot):
    r = client("32MiB", "init", "runtime-load", slot, DATA / "globals_sm90_lz4.fatbin", "usage")
    assert r.one("runtime-load") == ["2"]  # CUDA_ERROR_OUT_OF_MEMORY, as from a full GPU
    assert usages(r) == [(0, 0)]
    assert "out of GPU memory slice" in r.stderr


def test_a_fatbin_whose_globals_do_not_fit_is_refused(client):
    r = client("32MiB", "init", "library-load-wrapped", DATA / "globals_sm90_lz4.fatbin", "usage")
    assert r.one("library-load-wrapped") == ["2"]  # CUDA_ERROR_OUT_OF_MEMORY
    assert usages(r) == [(0, 0)]
    assert "out of GPU memory slice" in r.stderr
