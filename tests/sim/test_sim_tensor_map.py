"""Tensor maps (Hopper's TMA descriptors, what FlashAttention 3's kernels take): encoded when
cuda.h's rules hold, refused with CUDA_ERROR_INVALID_VALUE when one does not, and re-pointed by
cuTensorMapReplaceAddress."""

from __future__ import annotations

from pathlib import Path

from simkit import json_out, run_py

PROBE = """
import ctypes, json
cu = ctypes.CDLL("libcuda.so.1")
u64, u32 = ctypes.c_uint64, ctypes.c_uint32
out = {}
blob = ctypes.create_string_buffer(128 + 64)
base = ctypes.addressof(blob)
map_at = ctypes.c_void_p(base + (-base) % 64)            # 64-byte aligned, as the driver needs

def encode(rank=2, address=0x10000, dims=(64, 256), strides=(128,), box=(64, 64), elem=(1, 1),
           dtype=9, interleave=0, where=None):
    return cu.cuTensorMapEncodeTiled(
        where or map_at, dtype, u32(rank), ctypes.c_void_p(address), (u64 * 5)(*dims),
        (u64 * 4)(*strides), (u32 * 5)(*box), (u32 * 5)(*elem), interleave, 0, 0, 0)

out["before_init"] = encode()
assert cu.cuInit(0) == 0
out["ok"] = encode()
out["address"] = ctypes.c_uint64.from_address(map_at.value).value
out["rank0"] = encode(rank=0)
out["rank6"] = encode(rank=6)
out["address_unaligned"] = encode(address=0x10008)
out["map_unaligned"] = encode(where=ctypes.c_void_p(map_at.value + 8))
out["box_too_big"] = encode(box=(64, 300))
out["dim_zero"] = encode(dims=(0, 256))
out["stride_unaligned"] = encode(strides=(100,))
out["elem_stride_9"] = encode(elem=(1, 9))
out["interleave_rank2"] = encode(interleave=1)
out["replace"] = cu.cuTensorMapReplaceAddress(map_at, ctypes.c_void_p(0x20000))
out["replaced"] = ctypes.c_uint64.from_address(map_at.value).value
out["replace_unaligned"] = cu.cuTensorMapReplaceAddress(map_at, ctypes.c_void_p(0x20004))
print(json.dumps(out))
"""


def test_tensor_maps_follow_the_drivers_rules(simlib: Path) -> None:
    proc = run_py(simlib, PROBE)
    assert proc.returncode == 0, proc.stderr
    r = json_out(proc)
    assert r["before_init"] == 3  # CUDA_ERROR_NOT_INITIALIZED
    assert r["ok"] == 0 and r["address"] == 0x10000, r
    bad = (
        "rank0",
        "rank6",
        "address_unaligned",
        "map_unaligned",
        "box_too_big",
        "dim_zero",
        "stride_unaligned",
        "elem_stride_9",
        "interleave_rank2",
        "replace_unaligned",
    )
    assert {k: r[k] for k in bad} == dict.fromkeys(bad, 1), r  # CUDA_ERROR_INVALID_VALUE
    assert r["replace"] == 0 and r["replaced"] == 0x20000, r
