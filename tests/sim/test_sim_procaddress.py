"""cuGetProcAddress against the CUDA typedef headers, and cudart-style loading."""

from __future__ import annotations

from pathlib import Path

import pytest
from simkit import cuda_include, exported, run_py, typedef_variants


def _expected(variants: list[tuple[int, str]], base: str, version: int, per_thread: bool):
    """The symbol the real driver serves, by the k-th-variant rule of cudaTypedefs.h."""
    plain = [v for v, s in variants if not s]
    names = {v: base if k == 0 else f"{base}_v{k + 1}" for k, v in enumerate(plain)}
    if per_thread:
        pts = [(v, s) for v, s in variants if s and v <= version]
        if pts:
            v, s = max(pts)
            return names[max(p for p in plain if p <= v)] + s
    ok = [v for v in plain if v <= version]
    return names[max(ok)] if ok else None


def test_get_proc_address_matches_cuda_typedefs(run, simlib: Path) -> None:
    symbols = set(exported(simlib / "libcuda.so.1"))
    typedefs = typedef_variants()
    bases = sorted(
        b
        for b in typedefs
        if any(s == b or s.startswith(b + "_v") or s in (b + "_ptsz", b + "_ptds") for s in symbols)
    )
    assert {"cuMemAlloc", "cuMemCreate", "cuGetProcAddress", "cuLaunchKernel"} <= set(bases)
    queries, expect = [], []
    for base in bases:
        versions = sorted({v for v, _ in typedefs[base]})
        for version in [versions[0] - 10, *versions, 99999]:
            for flags in (0, 1, 2):
                queries.append(f"{base} {version} {flags}")
                expect.append(_expected(typedefs[base], base, version, flags == 2))
    out = run("resolve", stdin="\n".join(queries) + "\n").stdout.splitlines()
    assert len(out) == len(queries)
    for query, line, want in zip(queries, out, expect, strict=True):
        rc, status, name = line.split()
        if want is None:
            assert (rc, status, name) == ("500", "2", "-"), query  # VERSION_NOT_SUFFICIENT
        else:
            assert (rc, status, name) == ("0", "0", want), query
    # Every exported function is reachable through cuGetProcAddress.
    assert {line.split()[2] for line in out} - {"-"} == symbols


def test_get_proc_address_specific_choices(run) -> None:
    queries = {
        "cuMemAlloc 2000 0": "0 0 cuMemAlloc",
        "cuMemAlloc 3020 0": "0 0 cuMemAlloc_v2",
        "cuMemAlloc 13000 2": "0 0 cuMemAlloc_v2",  # no per-thread variant
        "cuMemAllocAsync 13000 0": "0 0 cuMemAllocAsync",
        "cuMemAllocAsync 13000 1": "0 0 cuMemAllocAsync",
        "cuMemAllocAsync 13000 2": "0 0 cuMemAllocAsync_ptsz",
        "cuMemcpyHtoD 13000 2": "0 0 cuMemcpyHtoD_v2_ptds",
        "cuStreamSynchronize 13000 2": "0 0 cuStreamSynchronize_ptsz",
        "cuCtxCreate 12050 0": "0 0 cuCtxCreate_v4",
        "cuCtxCreate 12040 0": "0 0 cuCtxCreate_v3",
        "cuGetProcAddress 11030 0": "0 0 cuGetProcAddress",
        "cuGetProcAddress 12000 0": "0 0 cuGetProcAddress_v2",
        "cuMemAlloc 1000 0": "500 2 -",  # version not sufficient
        "cuNoSuchFunction 13000 0": "500 1 -",  # symbol not found
        "cuMemAlloc_v2 13000 0": "500 1 -",  # base names only
        "cuMemAlloc 13000 4": "1 99 untouched",  # bad flags: INVALID_VALUE
    }
    out = run("resolve", stdin="\n".join(queries) + "\n").stdout.splitlines()
    assert dict(zip(queries, out, strict=True)) == queries


def test_cudart_style_bootstrap(run) -> None:
    assert run("bootstrap", devices=2).stdout.strip() == "devices 2"


def test_real_cudart_does_not_crash(simlib: Path, tmp_path: Path) -> None:
    """The toolkit's libcudart, if installed, starts on the simulator (its private tables)."""
    cudart = next((p for p in (cuda_include().parent / "lib64").glob("libcudart.so.*")), None)
    if cudart is None:
        pytest.skip("no libcudart")
    code = f"""
        import ctypes
        rt = ctypes.CDLL({str(cudart)!r})
        n = ctypes.c_int(-1)
        rc = rt.cudaGetDeviceCount(ctypes.byref(n))
        print(rc, n.value)
    """
    proc = run_py(simlib, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "1"], proc.stdout
