"""Functions on the simulator: names of any length, attributes, and occupancy from the simulated
device's documented limits (2048 threads, 32 blocks, 65536 registers and 228 KiB of shared
memory a multiprocessor, 1 KiB reserved a block, 32 registers a thread, 132 multiprocessors)."""

from __future__ import annotations

from pathlib import Path

from simkit import PRIMARY_CONTEXT, MiB, json_out, run_py

DATA = Path(__file__).resolve().parents[1] / "shim" / "data"

PROBE = PRIMARY_CONTEXT + """
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


STACK = PRIMARY_CONTEXT + """

def free():
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    ok(cu.cuMemGetInfo_v2(ctypes.byref(f), ctypes.byref(t)))
    return f.value

def stack():
    v = ctypes.c_size_t()
    ok(cu.cuCtxGetLimit(ctypes.byref(v), 0))
    return v.value

mod = ctypes.c_void_p()
ok(cu.cuModuleLoad(ctypes.byref(mod), PATH))
out = {}
for name in (b"no_stack", b"big_stack"):
    f, local = ctypes.c_void_p(), ctypes.c_int()
    ok(cu.cuModuleGetFunction(ctypes.byref(f), mod, name))
    ok(cu.cuFuncGetAttribute(ctypes.byref(local), 3, f))  # CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
    before = free()
    rc = cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, None, None, None)
    out[name.decode()] = {"local": local.value, "launch": rc, "taken": before - free(),
                          "stack": stack()}
print(json.dumps(out))
"""


def test_a_launch_grows_the_stack_a_kernel_needs_and_keeps_it(simlib: Path) -> None:
    """A kernel's stack frame is its cubin's (EIATTR_FRAME_SIZE, ptxas -v: 8000 bytes for
    big_stack); its launch grows the context's per-thread stack to what it needs, reserving it
    for every resident thread (cuda.h: the driver "automatically increases the per-thread stack
    size for each kernel launch as needed"), or fails with CUDA_ERROR_OUT_OF_MEMORY where that
    does not fit, the stack as it was."""
    code = STACK.replace("PATH", repr(str(DATA / "local_sm90.cubin").encode()))
    out = json_out(run_py(simlib, code))
    resident = 132 * 2048
    grown = -(-8000 * resident // (2 * MiB)) * 2 * MiB - 1024 * resident
    assert out["no_stack"] == {"local": 0, "launch": 0, "taken": 0, "stack": 1024}
    assert out["big_stack"] == {"local": 8000, "launch": 0, "taken": grown, "stack": 8000}
    small = json_out(run_py(simlib, code, memory="1GiB"))
    assert small["big_stack"] == {"local": 8000, "launch": 2, "taken": 0, "stack": 1024}


GRAPH_STACK = PRIMARY_CONTEXT + """
def stack():
    v = ctypes.c_size_t()
    ok(cu.cuCtxGetLimit(ctypes.byref(v), 0))
    return v.value

class KernelNode(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v1
    _fields_ = [("func", ctypes.c_void_p), ("grid", ctypes.c_uint * 3),
                ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("params", ctypes.c_void_p), ("extra", ctypes.c_void_p)]

mod, f, graph, node, exe = (ctypes.c_void_p() for _ in range(5))
ok(cu.cuModuleLoad(ctypes.byref(mod), PATH))
ok(cu.cuModuleGetFunction(ctypes.byref(f), mod, b"big_stack"))
ok(cu.cuGraphCreate(ctypes.byref(graph), 0))
p = KernelNode(f.value, (1, 1, 1), (1, 1, 1), 0, None, None)
ok(cu.cuGraphAddKernelNode(ctypes.byref(node), graph, None, 0, ctypes.byref(p)))
ok(cu.cuGraphInstantiateWithFlags(ctypes.byref(exe), graph, 0))
before = stack()
ok(cu.cuGraphLaunch(exe, None))
ok(cu.cuCtxSynchronize())
print(json.dumps({"before": before, "after": stack()}))
"""


def test_a_graph_launch_grows_the_stack_its_kernels_need(simlib: Path) -> None:
    """A graph's kernel nodes need the stack their launches would: its launch grows it."""
    code = GRAPH_STACK.replace("PATH", repr(str(DATA / "local_sm90.cubin").encode()))
    assert json_out(run_py(simlib, code)) == {"before": 1024, "after": 8000}
