#!/usr/bin/env python3
"""Generate the simulator's export tables from the real headers.

    python3 native/sim/gen_tables.py [CUDA include dir] [pynvml.py]

Writes, next to this script:
  sim_procs.inc   every driver entry point a real libcuda exports, with the CUDA
                  version each variant is served from (cuGetProcAddress's table)
  sim_stubs.inc   the entry points the simulator does not model, with their
                  parameter lists (cuda_stubs.c turns them into functions that
                  return CUDA_ERROR_NOT_SUPPORTED)
  sim_errors.inc  cuGetErrorName/String, from cuda.h
  nvml_stubs.inc  every NVML function nvidia-ml-py binds (and cgpu_nvml.h
                  declares) that no nvml_*.c file implements

The driver's export set comes from the PFN typedefs of cudaTypedefs.h and its
siblings (profiler, GL, EGL, VDPAU), by the rules the real driver follows:
  * PFN_<base>_v<ver> typedefs, sorted by version, are the variants <base>,
    <base>_v2, <base>_v3, ... (the k-th introduced variant is <base>_v<k>).
  * PFN_<base>_v<ver>_ptsz / _ptds is the per-thread-default-stream variant of
    the newest plain variant introduced at or before <ver>, with the suffix.
A function counts as implemented when a cuda_*.c file defines it with SIM_API
(nvml_*.c for NVML).  Every variant of an implemented base must be
implemented (else a lookup at an old version would silently hand out a stub);
the script refuses otherwise.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
STUB_FILES = {"cuda_stubs.c"}

# Typedef headers: (file, whether the stubs can be typed).  The interop ones
# need GL/EGL/VDPAU headers for their types, so their stubs take no parameters
# (on the SysV ABI a caller's arguments are then simply ignored).
TYPEDEF_HEADERS = [
    ("cudaTypedefs.h", True),
    ("cudaProfilerTypedefs.h", True),
    ("cudaGLTypedefs.h", False),
    ("cudaEGLTypedefs.h", False),
    ("cudaVDPAUTypedefs.h", False),
]

PFN = re.compile(r"\bPFN_(cu[A-Za-z0-9]+(?:_v[0-9]+)*?)_v([0-9]+)(_ptsz|_ptds)?\b")
PFN_DEF = re.compile(
    r"typedef\s+CUresult\s*\(\s*CUDAAPI\s*\*\s*PFN_(\w+)\s*\)\s*\((.*?)\)\s*;", re.S
)


def variants(typedefs: str) -> dict[str, list[tuple[int, str]]]:
    """base -> sorted [(version, flags-suffix or '')] from a typedef header."""
    out: dict[str, set[tuple[int, str]]] = defaultdict(set)
    for m in PFN.finditer(typedefs):
        out[m.group(1)].add((int(m.group(2)), m.group(3) or ""))
    return {b: sorted(v) for b, v in out.items()}


def exports(typedefs: str) -> list[tuple[str, str, int, bool, str]]:
    """[(base, symbol, version, per_thread, parameter list)] for every PFN typedef."""
    params = {n: " ".join(p.split()) for n, p in PFN_DEF.findall(typedefs)}
    rows = []
    for base, vs in sorted(variants(typedefs).items()):
        plain = [v for v, suf in vs if not suf]
        names = {v: base if k == 0 else f"{base}_v{k + 1}" for k, v in enumerate(plain)}
        for v, suf in vs:
            sym = names[v] if not suf else names[max(p for p in plain if p <= v)] + suf
            rows.append((base, sym, v, bool(suf), params[f"{base}_v{v}{suf}"]))
    return rows


def implemented(files: list[Path], ret: str) -> set[str]:
    """Names defined as `SIM_API <ret> name(` in the given sources."""
    pat = re.compile(rf"^SIM_API\s+{ret}\s+\**\s*(\w+)\s*\(", re.M)
    return {n for f in files for n in pat.findall(f.read_text())}


def check(rows: list[tuple[str, str, int, bool, str]], impl: set[str]) -> None:
    by_base: dict[str, set[str]] = defaultdict(set)
    for base, sym, _v, _pt, _p in rows:
        by_base[base].add(sym)
    for base, syms in sorted(by_base.items()):
        if syms & impl and syms - impl:
            sys.exit(f"gen_tables: {base}: variants {sorted(syms - impl)} are not implemented")
    unknown = impl - {sym for _b, sym, _v, _pt, _p in rows}
    if unknown:
        sys.exit(f"gen_tables: implemented but in no typedef header: {sorted(unknown)}")


# cuGetErrorString texts for the common codes; the rest are derived from the name.
ERROR_TEXT = {
    "CUDA_SUCCESS": "no error",
    "CUDA_ERROR_INVALID_VALUE": "invalid argument",
    "CUDA_ERROR_OUT_OF_MEMORY": "out of memory",
    "CUDA_ERROR_NOT_INITIALIZED": "initialization error",
    "CUDA_ERROR_DEINITIALIZED": "driver shutting down",
    "CUDA_ERROR_STUB_LIBRARY": "CUDA driver is a stub library",
    "CUDA_ERROR_DEVICE_UNAVAILABLE": "CUDA-capable device(s) is/are busy or unavailable",
    "CUDA_ERROR_NO_DEVICE": "no CUDA-capable device is detected",
    "CUDA_ERROR_INVALID_DEVICE": "invalid device ordinal",
    "CUDA_ERROR_INVALID_IMAGE": "device kernel image is invalid",
    "CUDA_ERROR_INVALID_CONTEXT": "invalid device context",
    "CUDA_ERROR_ALREADY_MAPPED": "resource already mapped",
    "CUDA_ERROR_NO_BINARY_FOR_GPU": "no kernel image is available for execution on the device",
    "CUDA_ERROR_NOT_MAPPED": "resource not mapped",
    "CUDA_ERROR_UNSUPPORTED_LIMIT": "limit is not supported on this architecture",
    "CUDA_ERROR_INVALID_HANDLE": "invalid resource handle",
    "CUDA_ERROR_ILLEGAL_STATE": "the operation cannot be performed in the present state",
    "CUDA_ERROR_NOT_FOUND": "named symbol not found",
    "CUDA_ERROR_NOT_READY": "device not ready",
    "CUDA_ERROR_ILLEGAL_ADDRESS": "an illegal memory access was encountered",
    "CUDA_ERROR_LAUNCH_FAILED": "unspecified launch failure",
    "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE":
        "primary context for the specified device has already been initialized",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED": "context is destroyed",
    "CUDA_ERROR_NOT_PERMITTED": "operation not permitted",
    "CUDA_ERROR_NOT_SUPPORTED": "operation not supported",
    "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH":
        "system has unsupported display driver / cuda driver combination",
    "CUDA_ERROR_UNKNOWN": "unknown error",
}


def errors(cuda_h: str) -> list[tuple[str, int, str]]:
    body = cuda_h[cuda_h.index("typedef enum cudaError_enum"):]
    body = body[: body.index("} CUresult;")]
    out = []
    for name, val in re.findall(r"\b(CUDA_(?:SUCCESS|ERROR_[A-Z0-9_]+))\s*=\s*(\d+)", body):
        text = ERROR_TEXT.get(name) or name.removeprefix("CUDA_ERROR_").lower().replace("_", " ")
        out.append((name, int(val), text))
    return out


def nvml_names(pynvml_py: Path) -> set[str]:
    """Every NVML function nvidia-ml-py binds, plus those cgpu_nvml.h declares."""
    names = set(re.findall(r'_nvmlGetFunctionPointer\("(nvml\w+)"\)', pynvml_py.read_text()))
    header = (HERE.parent / "include" / "cgpu_nvml.h").read_text()
    names |= set(re.findall(r"^nvmlReturn_t\s+(nvml\w+)\s*\(", header, re.M))
    return names


def write(name: str, source: str, lines: list[str]) -> None:
    head = [f"/* Generated by native/sim/gen_tables.py from {source}: do not edit. */"]
    (HERE / name).write_text("\n".join(head + lines) + "\n")
    print(f"{name}: {len(lines) - 1} entries")


def main() -> None:
    inc = Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/local/cuda-13.0/include")
    if len(sys.argv) > 2:
        pynvml_py = Path(sys.argv[2])
    else:
        spec = importlib.util.find_spec("pynvml")
        if not spec or not spec.origin:
            sys.exit("gen_tables: pynvml not found: pass the path of nvidia-ml-py's pynvml.py")
        pynvml_py = Path(spec.origin)

    rows, untyped = [], set()
    for header, typed in TYPEDEF_HEADERS:
        hrows = exports((inc / header).read_text())
        rows += hrows
        if not typed:
            untyped |= {sym for _b, sym, _v, _pt, _p in hrows}
    impl = implemented(
        [f for f in HERE.glob("cuda_*.c") if f.name not in STUB_FILES], "CUresult"
    )
    check(rows, impl)

    write("sim_procs.inc", "the CUDA typedef headers", [
        "/* SIM_PROC(base name, exported symbol, CUDA version introduced, per-thread stream) */",
        *(f'SIM_PROC("{b}", {s}, {v}, {int(p)})' for b, s, v, p, _ in rows),
    ])
    stubs = {}
    for _b, sym, _v, _pt, params in rows:
        if sym not in impl:
            stubs[sym] = params
    write("sim_stubs.inc", "the CUDA typedef headers", [
        "/* SIM_STUB(symbol, (parameters)) or SIM_STUB_UNTYPED(symbol) */",
        *(
            f"SIM_STUB_UNTYPED({s})" if s in untyped else f"SIM_STUB({s}, ({p}))"
            for s, p in sorted(stubs.items())
        ),
    ])
    errs = errors((inc / "cuda.h").read_text())
    write("sim_errors.inc", "cuda.h", [
        "/* SIM_ERR(code, name, text) */",
        *(f'SIM_ERR({v}, "{n}", "{t}")' for n, v, t in errs),
    ])
    nvml_impl = implemented(
        [f for f in HERE.glob("nvml_*.c") if f.name != "nvml_stubs.c"],
        r"(?:nvmlReturn_t|const\s+char)",
    )
    write("nvml_stubs.inc", "nvidia-ml-py's pynvml.py and cgpu_nvml.h", [
        "/* NVML_STUB(symbol) */",
        *(f"NVML_STUB({n})" for n in sorted(nvml_names(pynvml_py) - nvml_impl)),
    ])


if __name__ == "__main__":
    main()
