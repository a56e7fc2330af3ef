"""The whole driver and NVML surface: every public entry point is exported, what the
simulator does not model answers NOT_SUPPORTED, and what clients use is modelled."""

from __future__ import annotations

import re
from pathlib import Path

from simkit import REPO, GiB, MiB, driver_symbols, exported, run_py

CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_NOT_SUPPORTED = 801
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3


def _stubs(inc: str, macro: str) -> list[str]:
    text = (REPO / "native" / "sim" / inc).read_text()
    return re.findall(rf"^{macro}\((\w+)", text, re.M)


def test_every_driver_entry_point_is_exported(simlib: Path) -> None:
    names = set(exported(simlib / "libcuda.so.1"))
    assert names == driver_symbols()
    # The versioned names a real libcuda has, interop and profiler ones included.
    assert {
        "cuMemAlloc",
        "cuMemAlloc_v2",
        "cuMemcpyHtoD_v2_ptds",
        "cuIpcOpenMemHandle_v2",
        "cuStreamGetCaptureInfo_v3_ptsz",
        "cuCtxAttach",
        "cuGraphicsGLRegisterBuffer",
        "cuEGLStreamConsumerConnect",
        "cuVDPAUGetDevice",
        "cuProfilerStart",
    } <= names


def test_every_nvml_function_pynvml_binds_is_exported(simlib: Path, pynvml_ok) -> None:
    import pynvml

    source = Path(pynvml.__file__).read_text()
    bound = set(re.findall(r'_nvmlGetFunctionPointer\("(nvml\w+)"\)', source))
    assert len(bound) > 300
    missing = bound - set(exported(simlib / "libnvidia-ml.so.1"))
    assert not missing


def test_every_unmodelled_driver_call_returns_not_supported(simlib: Path) -> None:
    """Each stub answers NOT_INITIALIZED before cuInit and NOT_SUPPORTED after, and none
    crashes (the stubs ignore their arguments, so none are passed)."""
    stubs = _stubs("sim_stubs.inc", r"SIM_STUB(?:_UNTYPED)?")
    assert len(stubs) > 300 and "cuGraphAddEmptyNode" in stubs and "cuGLInit" in stubs
    assert not set(stubs) - set(exported(simlib / "libcuda.so.1"))
    code = f"""
        import ctypes, json
        lib = ctypes.CDLL({str(simlib / "libcuda.so.1")!r})
        names = {stubs!r}
        before = {{n: getattr(lib, n)() for n in names}}
        assert lib.cuInit(0) == 0
        after = {{n: getattr(lib, n)() for n in names}}
        print(json.dumps([sorted(set(before.values())), sorted(set(after.values()))]))
    """
    proc = run_py(simlib, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"[[{CUDA_ERROR_NOT_INITIALIZED}], [{CUDA_ERROR_NOT_SUPPORTED}]]"


def test_unmodelled_calls_from_a_program(run_surface) -> None:
    assert run_surface("unmodelled").stdout.strip() == "CUDA_ERROR_NOT_SUPPORTED"


def test_every_unmodelled_nvml_call_returns_not_supported(simlib: Path) -> None:
    stubs = _stubs("nvml_stubs.inc", "NVML_STUB")
    assert "nvmlDeviceGetVgpuMetadata" in stubs and "nvmlUnitGetCount" in stubs
    code = f"""
        import ctypes, json
        lib = ctypes.CDLL({str(simlib / "libnvidia-ml.so.1")!r})
        names = {stubs!r}
        before = {{n: getattr(lib, n)() for n in names}}
        assert lib.nvmlInit_v2() == 0
        after = {{n: getattr(lib, n)() for n in names}}
        print(json.dumps([sorted(set(before.values())), sorted(set(after.values()))]))
    """
    proc = run_py(simlib, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"[[{NVML_ERROR_UNINITIALIZED}], [{NVML_ERROR_NOT_SUPPORTED}]]"


def test_cuctx_attach_and_detach(run_surface) -> None:
    assert run_surface("attach", memory="1GiB").stdout.strip() == "ok"


def test_ipc_handles_across_processes(run_surface, tmp_path: Path) -> None:
    # With a shared state file the child sees the exporter's 4 MiB, and opening the
    # handle does not charge it again.
    out = run_surface("ipc", memory="1GiB", state=tmp_path / "state").stdout.split()
    assert out == ["child", str(GiB - 4 * MiB), "parent", str(GiB)]


def test_stream_and_event_queries(run_surface) -> None:
    assert run_surface("queries").stdout.strip() == "ok"


def test_default_stream_ordered_pool(run_surface) -> None:
    assert run_surface("pool", devices=2).stdout.strip() == "ok"
