"""What NVIDIA's libraries (cuBLAS 13, cuBLASLt, cuDNN) need of the driver, on the simulator:
globals of zstd-compressed cubins in fat binaries, fat binaries in the runtime's wrapper handed
to cuLibraryLoadData, the product's PCI ids, and thread-block clusters that fill GPCs.
(The libraries themselves run in tests/realstack/test_torch_libraries.py.)"""

from __future__ import annotations

from pathlib import Path

from simkit import PRIMARY_CONTEXT, MiB, json_out, run_py

DATA = Path(__file__).resolve().parents[1] / "shim" / "data"
# nvcc --compress-mode=size (tests/shim/data/globals.cu): its sm_90 cubin zstd-compressed.
ZSTD_FATBIN = DATA / "globals_sm90_zstd.fatbin"

GLOBALS = PRIMARY_CONTEXT + """
image = open(sys.argv[1], "rb").read()
buf = ctypes.create_string_buffer(image, len(image))

class Wrapper(ctypes.Structure):  # __fatBinC_Wrapper_t
    _fields_ = [("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("data", ctypes.c_void_p), ("filename_or_fatbins", ctypes.c_void_p)]

def free():
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    ok(cu.cuMemGetInfo_v2(ctypes.byref(f), ctypes.byref(t)))
    return f.value

def found(lib, name):
    ptr, size = ctypes.c_uint64(), ctypes.c_size_t()
    rc = cu.cuLibraryGetGlobal(ctypes.byref(ptr), ctypes.byref(size), lib, name)
    return [rc, size.value]

out = {}
wrapper = Wrapper(0x466243B1, 1, ctypes.addressof(buf), None)
for how, code in (("fatbin", ctypes.addressof(buf)), ("wrapper", ctypes.addressof(wrapper))):
    before = free()
    lib = ctypes.c_void_p()
    ok(cu.cuLibraryLoadData(ctypes.byref(lib), ctypes.c_void_p(code), None, None, 0, None, None, 0))
    out[how] = {"charged": before - free(), "big": found(lib, b"big"),
                "coef": found(lib, b"coef"), "none": found(lib, b"nothing")}
    ok(cu.cuLibraryUnload(lib))
    out[how]["back"] = free() == before
bad = Wrapper(0x466243B1, 7, ctypes.addressof(buf), None)
lib = ctypes.c_void_p()
out["bad_version"] = cu.cuLibraryLoadData(ctypes.byref(lib), ctypes.byref(bad), None, None, 0,
                                          None, None, 0)
print(json.dumps(out))
"""


def test_compressed_cubin_globals_load_from_fatbin_and_wrapper(simlib: Path) -> None:
    proc = run_py(simlib, GLOBALS.replace("sys.argv[1]", repr(str(ZSTD_FATBIN))))
    assert proc.returncode == 0, proc.stderr
    r = json_out(proc)
    for how in ("fatbin", "wrapper"):
        got = r[how]
        assert got["big"] == [0, 64 * MiB], got
        assert got["coef"] == [0, 1024], got
        assert got["none"][0] == 500, got  # CUDA_ERROR_NOT_FOUND
        # 64 MiB + 16 bytes + 1 KiB, in whole pages of the 2 MiB granularity.
        assert got["charged"] == 66 * MiB and got["back"], got
    assert r["bad_version"] == 200, r  # CUDA_ERROR_INVALID_IMAGE


def test_device_ids_and_clusters(simlib: Path) -> None:
    proc = run_py(
        simlib,
        """
        import ctypes, json
        cu = ctypes.CDLL("libcuda.so.1")
        assert cu.cuInit(0) == 0
        def attr(a):
            v = ctypes.c_int()
            assert cu.cuDeviceGetAttribute(ctypes.byref(v), a, 0) == 0
            return v.value & 0xFFFFFFFF
        ctx = ctypes.c_void_p()
        assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
        assert cu.cuCtxSetCurrent(ctx) == 0
        mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
        assert cu.cuModuleLoadData(ctypes.byref(mod), b"\\x7fELF") == 0
        assert cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"k") == 0
        assert cu.cuFuncSetAttribute(fn, 8, 232448) == 0                # max dynamic smem
        assert cu.cuFuncSetAttribute(fn, 14, 1) == 0                    # non-portable clusters

        class Attr(ctypes.Structure):
            _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_int), ("val", ctypes.c_uint * 16)]

        class Config(ctypes.Structure):
            _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                        ("smem", ctypes.c_uint), ("stream", ctypes.c_void_p),
                        ("attrs", ctypes.POINTER(Attr)), ("n", ctypes.c_uint)]

        def clusters(size):
            a = Attr(4, 0)                                              # cluster dimension
            a.val[0], a.val[1], a.val[2] = size, 1, 1
            cfg = Config((ctypes.c_uint * 3)(size, 1, 1), (ctypes.c_uint * 3)(128, 1, 1),
                         232448, None, ctypes.pointer(a), 1)
            n = ctypes.c_int(-1)
            rc = cu.cuOccupancyMaxActiveClusters(ctypes.byref(n), fn, ctypes.byref(cfg))
            return [rc, n.value]

        print(json.dumps({"pci": attr(139), "subsystem": attr(140),
                          "clusters": {s: clusters(s) for s in (1, 2, 8, 16, 17)}}))
        """,
    )
    assert proc.returncode == 0, proc.stderr
    r = json_out(proc)
    # An H100 SXM5, as NVML's PCI ids say: device 0x2330, vendor 0x10de.
    assert (r["pci"], r["subsystem"]) == (0x233010DE, 0x16C110DE), r
    # One 227 KiB block per SM; a cluster stays in one of the 8 GPCs (14 to 18 SMs).
    assert r["clusters"] == {
        "1": [0, 132],
        "2": [0, 66],
        "8": [0, 15],
        "16": [0, 7],
        "17": [912, -1],  # CUDA_ERROR_INVALID_CLUSTER_SIZE: over 16
    }, r


def test_private_slots_cublaslt_keys_its_state_by(simlib: Path) -> None:
    """Tools TLS slot 2 gives the calling thread's current context and runtime tools slot 4 a
    context's id (cuCtxGetId's); the SM topology table answers its slot 4 with an error, on
    which cuBLASLt goes on without the topology."""
    proc = run_py(
        simlib,
        """
        import ctypes, json
        cu = ctypes.CDLL("libcuda.so.1")
        assert cu.cuInit(0) == 0

        def table(hexid):
            t = ctypes.c_void_p()
            uuid = (ctypes.c_ubyte * 16)(*bytes.fromhex(hexid))
            assert cu.cuGetExportTable(ctypes.byref(t), uuid) == 0
            return (ctypes.c_void_p * 9).from_address(t.value)

        fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
        current = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(
            table("42d85a8123f6cb478298f6e78a3aecdc")[2])
        ctx_id = fn(table("21318c60971432488ca641ff7324c8f2")[4])
        topology = fn(table("1734dc26800d47458726c0f1e7dd8bca")[4])
        got = ctypes.c_void_p(1)
        none_rc = current(ctypes.byref(got))
        none = got.value
        ctx = ctypes.c_void_p()
        assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
        assert cu.cuCtxSetCurrent(ctx) == 0
        assert current(ctypes.byref(got)) == 0
        mine, want = ctypes.c_uint64(), ctypes.c_uint64()
        assert ctx_id(got, ctypes.byref(mine)) == 0
        assert cu.cuCtxGetId(ctx, ctypes.byref(want)) == 0
        sms, other = ctypes.c_void_p(), ctypes.c_uint64()
        print(json.dumps({"none": [none_rc, none], "same": got.value == ctx.value,
                          "id": mine.value == want.value,
                          "topology": topology(ctypes.byref(sms), ctypes.byref(other))}))
        """,
    )
    assert proc.returncode == 0, proc.stderr
    r = json_out(proc)
    assert r["none"] == [0, None], r  # no current context: success and NULL, as cuCtxGetCurrent
    assert r["same"] and r["id"], r
    assert r["topology"] == 801, r  # CUDA_ERROR_NOT_SUPPORTED


LIBRARY_MODULE = PRIMARY_CONTEXT + """
image = open(sys.argv[1], "rb").read()
buf = ctypes.create_string_buffer(image, len(image))

def free():
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    ok(cu.cuMemGetInfo_v2(ctypes.byref(f), ctypes.byref(t)))
    return f.value

before = free()
lib, mod, again = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
ok(cu.cuLibraryLoadData(ctypes.byref(lib), buf, None, None, 0, None, None, 0))
loaded = free()
ok(cu.cuLibraryGetModule(ctypes.byref(mod), lib))
ok(cu.cuLibraryGetModule(ctypes.byref(again), lib))
lib_ptr, mod_ptr, size = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_size_t()
ok(cu.cuLibraryGetGlobal(ctypes.byref(lib_ptr), None, lib, b"big"))
ok(cu.cuModuleGetGlobal_v2(ctypes.byref(mod_ptr), ctypes.byref(size), mod, b"big"))
func = ctypes.c_void_p()
out = {
    "charged": before - loaded,
    "same_module": mod.value == again.value,
    "module_free": loaded - free(),
    "global_shared": lib_ptr.value == mod_ptr.value,
    "size": size.value,
    "function": cu.cuModuleGetFunction(ctypes.byref(func), mod, b"touch"),
    "launch": cu.cuLaunchKernel(func, 1, 1, 1, 1, 1, 1, 0, None, None, None),
    "module_unload": cu.cuModuleUnload(mod),
}
ok(cu.cuCtxSynchronize())
ok(cu.cuLibraryUnload(lib))
out["back"] = free() == before
out["after_unload"] = cu.cuModuleGetFunction(ctypes.byref(func), mod, b"touch")
print(json.dumps(out))
"""


def test_a_library_s_module_is_its_own_with_its_globals(simlib: Path) -> None:
    """cuLibraryGetModule (what libcudart 12 launches a registered kernel from): one module per
    library, allocating nothing of its own, its globals the library's, its functions launchable;
    cuModuleUnload refuses it, and it goes with the library."""
    proc = run_py(simlib, LIBRARY_MODULE.replace("sys.argv[1]", repr(str(ZSTD_FATBIN))))
    assert proc.returncode == 0, proc.stderr
    out = json_out(proc)
    assert out["charged"] == 66 * MiB
    assert out["same_module"] and out["global_shared"] and out["back"]
    assert out["module_free"] == 0
    assert out["size"] == 64 * MiB
    assert out["function"] == 0 and out["launch"] == 0
    assert out["module_unload"] == 400  # CUDA_ERROR_INVALID_HANDLE: the library's to unload
    assert out["after_unload"] == 400
