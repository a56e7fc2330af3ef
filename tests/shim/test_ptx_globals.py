"""PTX modules' globals: the driver compiles PTX with ptxas and allocates the globals of the
module ptxas makes, so the shim charges them as ptxas lays them out (native/common/cgpu_ptx.c).

The reader is checked against NVIDIA's ptxas itself on modules it has never seen (random ones,
and nvcc's own output), then the shim's charge end to end on the simulator: PTX text from a
file and from memory, a library, and fatbins whose only entry for the device is PTX.
"""

from __future__ import annotations

import itertools
import random
import subprocess
from pathlib import Path

import pytest
from probe_result import pages, usages
from ptx_modules import CubinGlobals, cubin_globals, ptxas, random_module

MiB = 1 << 20
DATA = Path(__file__).with_name("data")
NATIVE_COMMON = Path(__file__).parents[2] / "native" / "common"
# globals.cu's globals as ptxas lays them out for sm_90: 64 MiB zero-filled, 16 bytes
# initialised, 1 KiB of constants and 16 bytes of their addresses (the sm_90 cubin's sections).
GLOBALS = pages(64 * MiB + 1056)


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory, cc: str) -> Path:
    """tests/shim/ptx_globals.c, built with the reader the shim and the simulator link."""
    out = tmp_path_factory.mktemp("ptx") / "ptx_globals"
    subprocess.run(
        [cc, "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-I", str(NATIVE_COMMON),
         str(Path(__file__).with_name("ptx_globals.c")), str(NATIVE_COMMON / "cgpu_ptx.c"),
         "-o", str(out)],
        check=True,
    )  # fmt: skip
    return out


def read(reader: Path, paths: list[Path]) -> dict[str, tuple[int, dict[str, tuple[int, int, int]]]]:
    """What the reader makes of each file: its total, and each variable's offset, size and
    alignment."""
    out = subprocess.run(
        [str(reader), *map(str, paths)], capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, tuple[int, dict[str, tuple[int, int, int]]]] = {}
    current: dict[str, tuple[int, int, int]] = {}
    for line in out.splitlines():
        words = line.split()
        if words[0] == "module":
            current = {}
            found[words[1]] = (int(words[2]), current)
        else:
            current[words[1]] = (int(words[2]), int(words[3]), int(words[4]))
    return found


def compile_ptx(ptx: Path) -> CubinGlobals | None:
    """ptxas's module for an sm_90 device (what the driver's JIT makes), or None if ptxas
    refuses the text."""
    cubin = ptx.with_suffix(".cubin")
    done = subprocess.run(
        [str(ptxas()), "-arch=sm_90", str(ptx), "-o", str(cubin)], capture_output=True, text=True
    )
    return cubin_globals(cubin.read_bytes()) if done.returncode == 0 else None


def test_random_modules_are_read_as_ptxas_lays_them_out(reader, tmp_path):
    """200 modules the reader has never seen (every type, vector, alignment, linkage, dimension
    and initialiser PTX allows a module-scope variable, comments and debug sections around
    them): each variable has the size ptxas gives it, and the total is never below ptxas's and
    above it only by the order of the two constant banks, which follows the code ptxas makes
    (at most the largest section alignment; 518 of 600 modules of another seed were exact, 24
    that far over)."""
    rng = random.Random(2026_11_27)
    paths = []
    for i in range(200):
        path = tmp_path / f"m{i}.ptx"
        path.write_text(random_module(rng))
        paths.append(path)
    ours = read(reader, paths)
    exact = 0
    for path in paths:
        theirs = compile_ptx(path)
        assert theirs is not None, path.read_text()
        total, variables = ours[str(path)]
        assert {name: v[1] for name, v in variables.items()} == theirs.sizes, path.read_text()
        assert theirs.total <= total <= theirs.total + theirs.largest_alignment, path.read_text()
        exact += total == theirs.total
        # Laid out: each variable aligned, none over another, all within the total.
        spans = sorted((offset, offset + size) for offset, size, _ in variables.values() if size)
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
        assert all(offset % align == 0 for offset, _, align in variables.values())
        assert not spans or spans[-1][1] <= total
    assert exact >= 0.75 * len(paths)  # the bank order decides the rest


@pytest.mark.parametrize("name", ["globals.ptx", "globals_debug.ptx"])
def test_nvcc_s_ptx_is_read_as_ptxas_lays_it_out(reader, tmp_path, name):
    """nvcc's own PTX of globals.cu, plain and with -G (DWARF sections, .loc lines, and a
    debug target, whose build has no bank of addresses): exactly the globals of ptxas's
    module."""
    ptx = tmp_path / name
    # nvcc 13.0 writes PTX ISA 9.0; Triton's ptxas (CUDA 12.9) reads up to 8.8, and nothing
    # in these modules is newer than 8.0.
    ptx.write_text((DATA / name).read_text().replace(".version 9.0", ".version 8.0"))
    theirs = compile_ptx(ptx)
    assert theirs is not None
    total, variables = read(reader, [ptx])[str(ptx)]
    assert total == theirs.total
    assert {name: v[1] for name, v in variables.items()} == theirs.sizes
    assert theirs.sizes == {"big": 64 * MiB, "small_init": 16, "coef": 1024}


def test_ptx_modules_are_charged_at_load_and_given_back(client):
    """PTX from a file (cuModuleLoad), from memory (cuModuleLoadData) and as a library
    (cuLibraryLoadFromFile): charged what the driver allocates before it compiles, the driver's
    per-process figure agrees, and a variable has the size ptxas gives it."""
    ptx = DATA / "globals.ptx"
    r = client(
        "1GiB",
        "init",
        "module-load", ptx, "usage", "module-global", "big",
        "module-load-data", ptx, "usage", "module-global", "small_init",
        "module-unload", "module-unload", "usage",
        "library-load", ptx, "usage", "library-global", "coef", "library-unload", "usage",
    )  # fmt: skip
    assert r.one("module-load") == ["0"] and r.one("module-load-data") == ["0"]
    assert r.lines("module-global") == [["0", str(64 * MiB)], ["0", "16"]]
    assert r.one("library-global") == ["0", "1024"]
    assert usages(r) == [
        (GLOBALS, GLOBALS),
        (2 * GLOBALS, 2 * GLOBALS),
        (0, 0),
        (GLOBALS, GLOBALS),
        (0, 0),
    ]


@pytest.mark.parametrize(
    "name", ["globals_ptx80.fatbin", "globals_ptx80_lz4.fatbin", "globals_ptx80_zstd.fatbin"]
)
def test_a_fatbin_with_only_ptx_for_the_device_is_charged_its_ptx_globals(client, name):
    """A fatbin with no cubin for the device (compute_80 PTX only, as a library built before
    the GPU was), stored plain, LZ4 or zstd: the driver compiles its PTX, and the shim charges
    the globals of that, from a file and from the wrapper libcudart hands cuLibraryLoadData."""
    fatbin = DATA / name
    r = client(
        "1GiB",
        "init",
        "module-load", fatbin, "usage", "module-unload", "usage",
        "library-load-wrapped", fatbin, "usage", "library-global", "big", "library-unload",
        "usage",
    )  # fmt: skip
    assert r.one("module-load") == ["0"] and r.one("library-load-wrapped") == ["0"]
    assert r.one("library-global") == ["0", str(64 * MiB)]
    assert usages(r) == [(GLOBALS, GLOBALS), (0, 0), (GLOBALS, GLOBALS), (0, 0)]


def test_the_ptx_the_driver_compiles_is_the_newest_no_newer_than_the_device(client):
    """One source as compute_75, compute_80 and compute_100 PTX and an sm_86 cubin (24, 48, 16
    and 40 MiB): an sm_90 device cannot run the sm_86 cubin, so the driver compiles the
    compute_80 PTX, and the shim charges its 48 MiB."""
    r = client("1GiB", "init", "module-load", DATA / "globals_ptx_by_arch.fatbin", "usage",
               "module-global", "big")  # fmt: skip
    assert r.one("module-global") == ["0", str(48 * MiB)]
    want = pages(48 * MiB + 8)  # and the address of `big`
    assert usages(r) == [(want, want)]


def test_a_ptx_module_whose_globals_do_not_fit_is_refused(client):
    ptx = DATA / "globals.ptx"
    r = client("128MiB", "init", "module-load", ptx, "module-load-data", ptx, "usage")
    assert r.one("module-load") == ["0"]
    assert r.one("module-load-data") == ["2"]  # CUDA_ERROR_OUT_OF_MEMORY
    assert usages(r) == [(GLOBALS, GLOBALS)]
    assert "out of GPU memory slice" in r.stderr


def test_damaged_ptx_neither_crashes_nor_skews_the_account(client, tmp_path):
    """PTX cut anywhere, with bytes changed, braces left open, absurd dimensions and alignments,
    or a declaration with no end: every load returns, the shim and the driver read the text
    alike, and the account ends where it started. Run under ASan and TSan too (scripts/test.sh).

    Where the damage leaves a module under 1 MiB of globals, the shim charges it as the driver
    packs small allocations, while the simulator gives each module a 2 MiB page: which a real
    driver does is the open question of the GPU check's `globals` step (docs/architecture.md)."""
    rng = random.Random(27)
    good = (DATA / "globals_debug.ptx").read_text()
    texts = [good[:cut] for cut in sorted(rng.sample(range(1, len(good)), 12))]
    for _ in range(12):
        chars = list(good)
        for at in rng.sample(range(len(chars)), 4):
            chars[at] = rng.choice("{}[]();,=.0123456789 \n/*\"")
        texts.append("".join(chars))
    texts += [
        ".version 8.0\n.global .b8 huge[99999999999999999999999];\n",
        ".version 8.0\n.global .b8 a[4096][4096][4096][4096];\n",
        ".version 8.0\n.global .align 3 .b8 odd[5];\n.const .align 999999 .u32 c;\n",
        ".version 8.0\n.global .u32 open[] = {{{{1, 2",
        ".version 8.0\n.global .v8 .b128 wide[2], .global",
        ".version 8.0\n.visible .entry k() {{{{ .global .b8 in_body[99999999]; \n",
        "/* never closed .version 8.0 .global .b8 x[9];",
        '.version 8.0\n.file 1 "unterminated\n.global .u64 after_string[1000];\n',
    ]
    steps: list[object] = ["init"]
    for i, text in enumerate(texts):
        path = tmp_path / f"damaged{i}.ptx"
        path.write_text(text)
        steps += ["module-load", path, "usage", "module-load-data", path, "usage"]
    r = client("8GiB", *steps, "reset", "usage")
    assert len(r.lines("module-load")) + len(r.lines("module-load-data")) == 2 * len(texts)
    loaded = 0  # modules the driver holds
    for line in r.stdout.splitlines():
        words = line.split()
        if words[0] in ("module-load", "module-load-data"):
            loaded += words[1] == "0"
        elif words[0] == "usage" and loaded:
            shim, host = int(words[2]), int(words[3])
            assert host - 2 * MiB * loaded < shim <= host, line
    assert ["2"] in r.lines("module-load")  # the absurd sizes do not fit the slice
    assert usages(r)[-1] == (0, 0)
