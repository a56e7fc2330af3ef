"""How the shim's PTX reader (native/include/cgpu_ptx.h) reads the PTX that NVIDIA ships.

Takes the PTX entries out of the fat binaries of installed libraries (PyTorch's and the CUDA
libraries' wheels by default), samples some from each library, and compares what the reader
makes of each module's globals with what NVIDIA's ptxas lays out compiling it for the entry's
own architecture (the driver compiles PTX with the same compiler). Prints one line a module
that is not exact, then the counts.

    python benchmarks/ptx_globals_libraries.py --ptxas /usr/local/cuda-13.0/bin/ptxas

The libraries' PTX is of ISA 9.x (CUDA 13): it needs a ptxas of CUDA 13. Modules that declare
extern functions are refused by ptxas alone (they are linked, not loaded), and counted apart.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import random
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "shim"))
from ptx_modules import cubin_globals  # noqa: E402

FATBIN_MAGIC = b"\x50\xed\x55\xba"
LZ4, ZSTD = 0x2000, 0x8000


def _zstd(data: bytes, size: int) -> bytes | None:
    lib = ctypes.CDLL("libzstd.so.1")
    lib.ZSTD_decompress.restype = ctypes.c_size_t
    lib.ZSTD_findFrameCompressedSize.restype = ctypes.c_size_t
    lib.ZSTD_isError.restype = ctypes.c_uint
    out = ctypes.create_string_buffer(size)
    frame = lib.ZSTD_findFrameCompressedSize(data, ctypes.c_size_t(len(data)))
    got = lib.ZSTD_decompress(out, ctypes.c_size_t(size), data, ctypes.c_size_t(frame))
    return None if lib.ZSTD_isError(got) else out.raw[:got]


def _lz4(src: bytes, size: int) -> bytes:
    out, i = bytearray(), 0
    while i < len(src) and len(out) < size:
        token = src[i]
        i += 1
        literals = token >> 4
        if literals == 15:
            while True:
                literals += src[i]
                i += 1
                if src[i - 1] != 255:
                    break
        out += src[i : i + literals]
        i += literals
        if len(out) >= size:
            break
        offset = src[i] | src[i + 1] << 8
        i += 2
        match = token & 15
        if match == 15:
            while True:
                match += src[i]
                i += 1
                if src[i - 1] != 255:
                    break
        for _ in range(match + 4):
            out.append(out[-offset])
    return bytes(out[:size])


def ptx_entries(path: Path) -> Iterator[tuple[int, bytes]]:
    """Each PTX entry of each fat binary in file `path`: (its architecture, its text)."""
    data = path.read_bytes()
    at = data.find(FATBIN_MAGIC)
    while at >= 0:
        (header,) = struct.unpack_from("<H", data, at + 6)
        (size,) = struct.unpack_from("<Q", data, at + 8)
        end = at + header + size
        if header < 16 or end > len(data):
            at = data.find(FATBIN_MAGIC, at + 4)
            continue
        entry = at + header
        while entry + 64 <= end:
            (kind,) = struct.unpack_from("<H", data, entry)
            head, payload = struct.unpack_from("<II", data, entry + 4)
            if head < 64 or entry + head + payload > end:
                break
            (arch,) = struct.unpack_from("<I", data, entry + 28)
            (flags,) = struct.unpack_from("<Q", data, entry + 40)
            (plain,) = struct.unpack_from("<Q", data, entry + 56)
            body: bytes | None = data[entry + head : entry + head + payload]
            if kind == 1 and body:
                if flags & ZSTD:
                    body = _zstd(body, plain)
                elif flags & LZ4:
                    body = _lz4(body, plain)
                if body:
                    yield arch, body.split(b"\0")[0]
            entry += head + payload
        at = data.find(FATBIN_MAGIC, end)


def default_libraries() -> list[Path]:
    site = Path(next(p for p in sys.path if p.endswith("site-packages")))
    found = [*sorted((site / "nvidia").glob("*/lib/*.so*")), site / "torch/lib/libtorch_cuda.so"]
    return [p for p in found if p.is_file()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ptxas", default="ptxas", help="NVIDIA's ptxas (of CUDA 13)")
    parser.add_argument("--per-library", type=int, default=40, help="modules sampled a library")
    parser.add_argument("--max-bytes", type=int, default=3_000_000, help="larger PTX is skipped")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("libraries", nargs="*", type=Path)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="ptx-globals-"))
    reader = work / "ptx_globals"
    subprocess.run(
        ["cc", "-std=c11", "-O2", "-I", str(ROOT / "native" / "include"),
         str(ROOT / "tests" / "shim" / "ptx_globals.c"), "-o", str(reader)],
        check=True,
    )  # fmt: skip
    sample: list[tuple[Path, int]] = []
    for lib in args.libraries or default_libraries():
        modules = [
            (arch, text)
            for arch, text in ptx_entries(lib)
            if arch >= 75  # ptxas 13 compiles for sm_75 and later
            and len(text) <= args.max_bytes
            and (b".global" in text or b".const" in text)
        ]
        for n, (arch, text) in enumerate(rng.sample(modules, min(len(modules), args.per_library))):
            path = work / f"{lib.name}.{n}.ptx"
            path.write_bytes(text)
            sample.append((path, arch))
    paths = [str(p) for p, _ in sample]
    out = subprocess.run([str(reader), *paths], capture_output=True, text=True, check=True)
    ours = {w[1]: int(w[2]) for w in map(str.split, out.stdout.splitlines()) if w[0] == "module"}
    counts: collections.Counter[str] = collections.Counter()
    for path, arch in sample:
        cubin = path.with_suffix(".cubin")
        done = subprocess.run(
            [args.ptxas, f"-arch=sm_{arch}", str(path), "-o", str(cubin)], capture_output=True
        )
        if done.returncode:
            counts["refused by ptxas (to be linked)"] += 1
            continue
        theirs = cubin_globals(cubin.read_bytes())
        counts["with globals"] += theirs.total > 0
        diff = ours[str(path)] - theirs.total
        verdict = "exact" if diff == 0 else "over" if diff > 0 else "under"
        counts[verdict] += 1
        if diff:
            read = ours[str(path)]
            print(f"{verdict} {path.name} sm_{arch}: {read} read, {theirs.total} laid out")
    print(f"{len(sample)} modules:", dict(counts))


if __name__ == "__main__":
    main()
