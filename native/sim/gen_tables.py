#!/usr/bin/env python3
"""Generate the simulator's tables from the CUDA headers.

sim_procs.inc (the cuGetProcAddress table) comes from cudaTypedefs.h, and
sim_errors.inc (cuGetErrorName/String) from cuda.h.

The table is the one place that says which driver entry points the simulated
libcuda.so.1 implements and from which CUDA version each variant is served.

    python3 native/sim/gen_tables.py [/usr/local/cuda-13.0/include]

Rules (the ones the real driver follows, visible in cudaTypedefs.h):
  * PFN_<base>_v<ver> typedefs, sorted by version, are the variants <base>,
    <base>_v2, <base>_v3, ... (the k-th introduced variant is <base>_v<k>).
  * PFN_<base>_v<ver>_ptsz / _ptds is the per-thread-default-stream variant of
    the newest plain variant introduced at or before <ver>, with the suffix.
Every variant of an implemented base must be implemented (else a lookup at an
old version would silently hand out the wrong ABI); the script refuses otherwise.
"""
from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

# Every exported CUDA driver symbol the simulator implements.
_IMPLEMENTED = """
cuInit cuDriverGetVersion cuDeviceGet cuDeviceGetCount cuDeviceGetName
cuDeviceGetUuid cuDeviceGetUuid_v2 cuDeviceTotalMem cuDeviceTotalMem_v2 cuDeviceGetAttribute
cuDeviceGetPCIBusId cuDeviceGetByPCIBusId cuDeviceComputeCapability cuDeviceCanAccessPeer
cuDeviceGetDefaultMemPool cuDeviceGetMemPool cuDeviceSetMemPool
cuGetErrorString cuGetErrorName cuGetProcAddress cuGetProcAddress_v2 cuGetExportTable
cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease_v2
cuDevicePrimaryCtxReset cuDevicePrimaryCtxReset_v2 cuDevicePrimaryCtxGetState
cuDevicePrimaryCtxSetFlags cuDevicePrimaryCtxSetFlags_v2
cuCtxCreate cuCtxCreate_v2 cuCtxCreate_v3 cuCtxCreate_v4 cuCtxDestroy cuCtxDestroy_v2
cuCtxAttach cuCtxDetach
cuCtxGetCurrent cuCtxSetCurrent cuCtxPushCurrent cuCtxPushCurrent_v2 cuCtxPopCurrent
cuCtxPopCurrent_v2 cuCtxGetDevice cuCtxGetDevice_v2 cuCtxSynchronize cuCtxSynchronize_v2
cuCtxGetApiVersion cuCtxGetFlags cuCtxGetStreamPriorityRange cuCtxGetLimit cuCtxSetLimit
cuCtxGetId
cuMemGetInfo cuMemGetInfo_v2 cuMemAlloc cuMemAlloc_v2 cuMemAllocPitch cuMemAllocPitch_v2
cuMemAllocManaged cuMemFree cuMemFree_v2 cuMemGetAddressRange cuMemGetAddressRange_v2
cuMemAllocHost cuMemAllocHost_v2 cuMemFreeHost cuMemHostAlloc cuPointerGetAttribute
cuMemcpy cuMemcpy_ptds cuMemcpyAsync cuMemcpyAsync_ptsz
cuMemcpyHtoD cuMemcpyHtoD_v2 cuMemcpyHtoD_v2_ptds
cuMemcpyDtoH cuMemcpyDtoH_v2 cuMemcpyDtoH_v2_ptds
cuMemcpyDtoD cuMemcpyDtoD_v2 cuMemcpyDtoD_v2_ptds
cuMemcpyHtoDAsync cuMemcpyHtoDAsync_v2 cuMemcpyHtoDAsync_v2_ptsz
cuMemcpyDtoHAsync cuMemcpyDtoHAsync_v2 cuMemcpyDtoHAsync_v2_ptsz
cuMemcpyDtoDAsync cuMemcpyDtoDAsync_v2 cuMemcpyDtoDAsync_v2_ptsz
cuMemsetD8 cuMemsetD8_v2 cuMemsetD8_v2_ptds cuMemsetD32 cuMemsetD32_v2 cuMemsetD32_v2_ptds
cuMemsetD8Async cuMemsetD8Async_ptsz cuMemsetD32Async cuMemsetD32Async_ptsz
cuMemGetAllocationGranularity cuMemCreate cuMemRelease cuMemAddressReserve cuMemAddressFree
cuMemMap cuMemUnmap cuMemSetAccess cuMemGetAllocationPropertiesFromHandle
cuMemRetainAllocationHandle
cuStreamCreate cuStreamCreateWithPriority cuStreamDestroy cuStreamDestroy_v2
cuStreamSynchronize cuStreamSynchronize_ptsz cuStreamQuery cuStreamQuery_ptsz
cuStreamWaitEvent cuStreamWaitEvent_ptsz
cuEventCreate cuEventDestroy cuEventDestroy_v2 cuEventRecord cuEventRecord_ptsz
cuEventSynchronize cuEventQuery
cuMemAllocAsync cuMemAllocAsync_ptsz cuMemAllocFromPoolAsync cuMemAllocFromPoolAsync_ptsz
cuMemFreeAsync cuMemFreeAsync_ptsz cuMemPoolCreate cuMemPoolDestroy cuMemPoolTrimTo
cuMemPoolSetAttribute cuMemPoolGetAttribute
cuArrayCreate cuArrayCreate_v2 cuArray3DCreate cuArray3DCreate_v2 cuArrayDestroy
cuArrayGetDescriptor cuArrayGetDescriptor_v2 cuArray3DGetDescriptor cuArray3DGetDescriptor_v2
cuMipmappedArrayCreate cuMipmappedArrayDestroy
cuLaunchKernel cuLaunchKernel_ptsz
"""
IMPLEMENTED = _IMPLEMENTED.split()

PFN = re.compile(r"\bPFN_(cu[A-Za-z0-9]+(?:_v[0-9]+)*?)_v([0-9]+)(_ptsz|_ptds)?\b")


def variants(typedefs: str) -> dict[str, list[tuple[int, str]]]:
    """base -> sorted [(version, flags-suffix or '')] from cudaTypedefs.h."""
    out: dict[str, set[tuple[int, str]]] = defaultdict(set)
    for m in PFN.finditer(typedefs):
        out[m.group(1)].add((int(m.group(2)), m.group(3) or ""))
    return {b: sorted(v) for b, v in out.items()}


def table(typedefs: str) -> list[tuple[str, str, int, bool]]:
    """[(base, symbol, version, per_thread)] for every implemented base."""
    impl = set(IMPLEMENTED)
    allv = variants(typedefs)
    bases = sorted({b for b in allv if any(s == b or s.startswith(b + "_") for s in impl)})
    rows = []
    served = set()
    for base in bases:
        plain = [v for v, suf in allv[base] if not suf]
        names = {v: base if k == 0 else f"{base}_v{k + 1}" for k, v in enumerate(plain)}
        if not (set(names.values()) & impl):
            continue
        for v in plain:
            rows.append((base, names[v], v, False))
        for v, suf in allv[base]:
            if suf:
                newest = max(p for p in plain if p <= v)
                rows.append((base, names[newest] + suf, v, True))
    for base, sym, _v, _pt in rows:
        served.add(sym)
        if sym not in impl:
            sys.exit(f"gen_tables: {base} has variant {sym}, which the simulator lacks")
    missing = impl - served
    if missing:
        sys.exit(f"gen_tables: implemented but not in cudaTypedefs.h: {sorted(missing)}")
    return rows


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


def main() -> None:
    inc = Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/local/cuda-13.0/include")
    rows = table((inc / "cudaTypedefs.h").read_text())
    here = Path(__file__).resolve().parent
    lines = [
        "/* Generated by native/sim/gen_tables.py from cudaTypedefs.h: do not edit. */",
        "/* SIM_PROC(base name, exported symbol, CUDA version introduced, per-thread stream) */",
    ]
    lines += [f'SIM_PROC("{b}", {s}, {v}, {int(p)})' for b, s, v, p in rows]
    (here / "sim_procs.inc").write_text("\n".join(lines) + "\n")
    print(f"sim_procs.inc: {len(rows)} entries")
    errs = errors((inc / "cuda.h").read_text())
    lines = [
        "/* Generated by native/sim/gen_tables.py from cuda.h: do not edit. */",
        "/* SIM_ERR(code, name, text) */",
    ]
    lines += [f'SIM_ERR({v}, "{n}", "{t}")' for n, v, t in errs]
    (here / "sim_errors.inc").write_text("\n".join(lines) + "\n")
    print(f"sim_errors.inc: {len(errs)} entries")


if __name__ == "__main__":
    main()
