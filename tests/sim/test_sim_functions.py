"""Functions on the simulator: names of any length, attributes, and occupancy from the simulated
device's documented limits (2048 threads, 32 blocks, 65536 registers and 228 KiB of shared
memory a multiprocessor, 1 KiB reserved a block, 32 registers a thread, 132 multiprocessors)."""

from __future__ import annotations

from pathlib import Path

from simkit import json_out, run_py

PROBE = """
import ctypes, json
cu = ctypes.CDLL("libcuda.so.1")
def ok(rc):
    assert rc == 0, rc
ok(cu.cuInit(0))
ctx = ctypes.c_void_p()
ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0))
ok(cu.cuCtxSetCurrent(ctx))
mod = ctypes.c_void_p()
ok(cu.cuModuleLoadData(ctypes.byref(mod), b"\\x7fELF"))
name = b"_Z6kernelI" + b"N2at6native" * 500 + b"E"
f1, f2 = ctypes.c_void_p(), ctypes.c_void_p()
ok(cu.cuModuleGetFunction(ctypes.byref(f1), mod, name))
ok(cu.cuModuleGetFunction(ctypes.byref(f2), mod, name))
got = ctypes.c_char_p()
ok(cu.cuFuncGetName(ctypes.byref(got), f1))

def attr(a):
    v = ctypes.c_int(-1)
    ok(cu.cuFuncGetAttribute(ctypes.byref(v), a, f1))
    return v.value

def blocks(block, smem):
    n = ctypes.c_int(-1)
    ok(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(n), f1, block,
                                                      ctypes.c_size_t(smem)))
    return n.value

out = {"same": f1.value == f2.value, "name_ok": got.value == name,
       "max_threads": attr(0), "regs": attr(4), "dyn_smem": attr(8),
       "b256": blocks(256, 0), "b1024": blocks(1024, 0), "b32": blocks(32, 0),
       "too_much_smem": blocks(128, 60000)}
out["set_big"] = cu.cuFuncSetAttribute(f1, 8, 100000)
out["dyn_smem_after"] = attr(8)
out["set_too_big"] = cu.cuFuncSetAttribute(f1, 8, 300000)
out["b128_100k"] = blocks(128, 100000)
grid, block = ctypes.c_int(), ctypes.c_int()
ok(cu.cuOccupancyMaxPotentialBlockSize(ctypes.byref(grid), ctypes.byref(block), f1, None,
                                       ctypes.c_size_t(0), 0))
out["potential"] = [grid.value, block.value]
print(json.dumps(out))
"""


def test_functions_names_attributes_and_occupancy(simlib: Path) -> None:
    proc = run_py(simlib, PROBE)
    assert proc.returncode == 0, proc.stderr
    r = json_out(proc)
    assert r["same"] and r["name_ok"]  # a 5.5 KB mangled name, one handle per name
    assert (r["max_threads"], r["regs"], r["dyn_smem"]) == (1024, 32, 48 << 10)
    # Threads bind 256 and 1024 (2048 a multiprocessor), registers too (32 x 256 x 8 = 65536);
    # 32-thread blocks stop at 32 blocks.
    assert (r["b256"], r["b1024"], r["b32"]) == (8, 2, 32)
    assert r["too_much_smem"] == 0  # over the 48 KiB the function may use before opting in
    assert r["set_big"] == 0 and r["dyn_smem_after"] == 100000
    assert r["set_too_big"] == 1  # CUDA_ERROR_INVALID_VALUE: over 227 KiB
    assert r["b128_100k"] == 233472 // (100000 + 1024)
    assert r["potential"] == [2 * 132, 1024]  # 2048 threads a multiprocessor; ties: largest
