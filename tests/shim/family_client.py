"""A scripted CUDA client for the remaining allocation families, run under the shim.

    python family_client.py <step> [args]... [<step> [args]...]...

It drives the driver through ctypes (dlopen + dlsym, as the CUDA runtime does) and
prints one line per step: the step's name, the CUDA result, then any values.  `usage`
prints what this process holds by both accounts: the shim's (the slice less what
cuMemGetInfo reports free) and NVML's per-process figure for this pid.
"""

from __future__ import annotations

import ctypes
import os
import sys

cuda = ctypes.CDLL("libcuda.so.1")
nvml = ctypes.CDLL("libnvidia-ml.so.1")

u64 = ctypes.c_uint64
ptr = ctypes.c_void_p

CU_LIMITS = {"stack": 0, "printf": 1, "heap": 2}
CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT = 2
CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4


class MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class MemPoolProps(ctypes.Structure):
    _fields_ = [
        ("allocType", ctypes.c_int),
        ("handleTypes", ctypes.c_int),
        ("location", MemLocation),
        ("win32SecurityAttributes", ptr),
        ("maxSize", ctypes.c_size_t),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 54),
    ]


class MemAllocNodeParams(ctypes.Structure):
    _fields_ = [
        ("poolProps", MemPoolProps),
        ("accessDescs", ptr),
        ("accessDescCount", ctypes.c_size_t),
        ("bytesize", ctypes.c_size_t),
        ("dptr", u64),
    ]


class IpcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]  # passed by value, as a struct


class FatbinWrapper(ctypes.Structure):
    """__fatBinC_Wrapper_t: what libcudart registers and hands to cuLibraryLoadData."""

    _fields_ = [
        ("magic", ctypes.c_int),
        ("version", ctypes.c_int),
        ("data", ptr),
        ("filename_or_fatbins", ptr),
    ]


FATBIN_WRAPPER_MAGIC = 0x466243B1
# The id of the driver's private table for the CUDA runtime (its module loaders).
CUDART_INTERFACE_ID = bytes.fromhex("6bd5fb6c5bf4e74a8987d93912fd9df9")


class NvmlProcess(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


def out(name: str, rc: int, *values: object) -> None:
    print(name, rc, *values, flush=True)


def pool_props() -> MemPoolProps:
    props = MemPoolProps()
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED
    props.location = MemLocation(CU_MEM_LOCATION_TYPE_DEVICE, 0)
    return props


class Client:
    """The objects the steps make, by kind."""

    def __init__(self) -> None:
        self.graph = ptr()
        self.execs: list[ptr] = []
        self.pools: list[ptr] = []
        self.pool_ptrs: list[int] = []
        self.ptrs: list[int] = []
        self.imports: list[int] = []
        self.modules: list[ptr] = []
        self.libraries: list[ptr] = []
        self.image = b""
        self.wrapped: list[tuple[ctypes.Array[ctypes.c_char], FatbinWrapper]] = []
        self.stream = ptr()
        self.captured: list[int] = []

    def init(self) -> None:
        rc = cuda.cuInit(0)
        ctx = ptr()
        if rc == 0:
            rc = cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)
        if rc == 0:
            rc = cuda.cuCtxSetCurrent(ctx)
        out("init", rc)

    def reset(self) -> None:
        """Reset the primary context (freeing all it held), then make it current again."""
        rc = cuda.cuDevicePrimaryCtxReset_v2(0)
        ctx = ptr()
        if rc == 0:
            rc = cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)
        if rc == 0:
            rc = cuda.cuCtxSetCurrent(ctx)
        out("reset", rc)

    def usage(self) -> None:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        rc = cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
        assert nvml.nvmlInit_v2() == 0
        dev = ptr()
        assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0
        count = ctypes.c_uint(64)
        procs = (NvmlProcess * 64)()
        assert nvml.nvmlDeviceGetComputeRunningProcesses_v3(dev, ctypes.byref(count), procs) == 0
        mine = sum(p.usedGpuMemory for p in procs[: count.value] if p.pid == os.getpid())
        out("usage", rc, total.value - free.value, mine)

    def setlimit(self, which: str, value: str) -> None:
        out("setlimit", cuda.cuCtxSetLimit(CU_LIMITS[which], ctypes.c_size_t(int(value))))

    def getlimit(self, which: str) -> None:
        value = ctypes.c_size_t()
        rc = cuda.cuCtxGetLimit(ctypes.byref(value), CU_LIMITS[which])
        out("getlimit", rc, value.value)

    def graph_alloc(self, size: str) -> None:
        rc = 0
        if not self.graph:
            rc = cuda.cuGraphCreate(ctypes.byref(self.graph), 0)
        node, params = ptr(), MemAllocNodeParams()
        params.poolProps = pool_props()
        params.bytesize = int(size)
        if rc == 0:
            rc = cuda.cuGraphAddMemAllocNode(
                ctypes.byref(node), self.graph, None, ctypes.c_size_t(0), ctypes.byref(params)
            )
        out("graph-alloc", rc)

    def graph_instantiate(self) -> None:
        exe = ptr()
        rc = cuda.cuGraphInstantiateWithFlags(ctypes.byref(exe), self.graph, ctypes.c_ulonglong(0))
        if rc == 0:
            self.execs.append(exe)
        out("graph-instantiate", rc)

    def graph_launch(self) -> None:
        rc = cuda.cuGraphLaunch(self.execs[-1], None)
        if rc == 0:
            rc = cuda.cuStreamSynchronize(None)
        out("graph-launch", rc)

    def graph_exec_destroy(self) -> None:
        out("graph-exec-destroy", cuda.cuGraphExecDestroy(self.execs.pop()))

    def graph_destroy(self) -> None:
        rc = cuda.cuGraphDestroy(self.graph)
        self.graph = ptr()
        out("graph-destroy", rc)

    def graph_trim(self) -> None:
        out("graph-trim", cuda.cuDeviceGraphMemTrim(0))

    def graph_reserved(self) -> None:
        value = u64()
        rc = cuda.cuDeviceGetGraphMemAttribute(
            0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, ctypes.byref(value)
        )
        out("graph-reserved", rc, value.value)

    def capture_begin(self) -> None:
        rc = 0
        if not self.stream:
            rc = cuda.cuStreamCreate(ctypes.byref(self.stream), 1)  # non-blocking
        out("capture-begin", rc or cuda.cuStreamBeginCapture_v2(self.stream, 2))  # relaxed

    def capture_alloc(self, size: str) -> None:
        """cuMemAllocAsync on the capturing stream (cudaMallocAsync in a captured region)."""
        p = u64()
        rc = cuda.cuMemAllocAsync(ctypes.byref(p), ctypes.c_size_t(int(size)), self.stream)
        if rc == 0:
            self.captured.append(p.value)
        out("capture-alloc", rc)

    def capture_free(self) -> None:
        out("capture-free", cuda.cuMemFreeAsync(u64(self.captured.pop()), self.stream))

    def capture_end(self) -> None:
        out("capture-end", cuda.cuStreamEndCapture(self.stream, ctypes.byref(self.graph)))

    def pool_create(self) -> None:
        pool, props = ptr(), pool_props()
        rc = cuda.cuMemPoolCreate(ctypes.byref(pool), ctypes.byref(props))
        if rc == 0:
            keep = u64(1 << 62)  # keep everything freed until trimmed
            rc = cuda.cuMemPoolSetAttribute(
                pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, ctypes.byref(keep)
            )
            self.pools.append(pool)
        out("pool-create", rc)

    def pool_alloc(self, size: str) -> None:
        p = u64()
        rc = cuda.cuMemAllocFromPoolAsync(
            ctypes.byref(p), ctypes.c_size_t(int(size)), self.pools[-1], None
        )
        if rc == 0:
            self.pool_ptrs.append(p.value)
        out("pool-alloc", rc)

    def pool_free_all(self) -> None:
        rc = 0
        while self.pool_ptrs and rc == 0:
            rc = cuda.cuMemFreeAsync(u64(self.pool_ptrs.pop()), None)
        out("pool-free-all", rc or cuda.cuStreamSynchronize(None))

    def pool_trim(self) -> None:
        out("pool-trim", cuda.cuMemPoolTrimTo(self.pools[-1], ctypes.c_size_t(0)))

    def pool_destroy(self) -> None:
        out("pool-destroy", cuda.cuMemPoolDestroy(self.pools.pop()))

    def alloc(self, size: str) -> None:
        p = u64()
        rc = cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(int(size)))
        if rc == 0:
            self.ptrs.append(p.value)
        out("alloc", rc)

    def free(self) -> None:
        out("free", cuda.cuMemFree_v2(u64(self.ptrs.pop())))

    def export(self) -> None:
        handle = IpcMemHandle()
        rc = cuda.cuIpcGetMemHandle(ctypes.byref(handle), u64(self.ptrs[-1]))
        out("export", rc, bytes(handle).hex())

    def import_(self, hexed: str) -> None:
        handle = IpcMemHandle.from_buffer_copy(bytes.fromhex(hexed))
        p = u64()
        rc = cuda.cuIpcOpenMemHandle_v2(ctypes.byref(p), handle, 0)
        if rc == 0:
            self.imports.append(p.value)
        out("import", rc)

    def close(self) -> None:
        out("close", cuda.cuIpcCloseMemHandle(u64(self.imports.pop())))

    def module_load(self, path: str) -> None:
        mod = ptr()
        rc = cuda.cuModuleLoad(ctypes.byref(mod), path.encode())
        if rc == 0:
            self.modules.append(mod)
        out("module-load", rc)

    def module_load_data(self, path: str) -> None:
        mod = ptr()
        with open(path, "rb") as f:
            self.image = f.read()  # the driver reads it during the call only
        rc = cuda.cuModuleLoadData(ctypes.byref(mod), self.image)
        if rc == 0:
            self.modules.append(mod)
        out("module-load-data", rc)

    def module_global(self, name: str) -> None:
        p, size = u64(), ctypes.c_size_t()
        rc = cuda.cuModuleGetGlobal_v2(
            ctypes.byref(p), ctypes.byref(size), self.modules[-1], name.encode()
        )
        out("module-global", rc, size.value)

    def ledger(self) -> None:
        """What the container's ledger holds on its first device (past the slice too, which
        cuMemGetInfo cannot show)."""
        from cgpu.core.ledger import read_ledger

        path = os.path.join(os.environ["CGPU_LEDGER_DIR"], "cgpu.ledger")
        out("ledger", 0, read_ledger(path).devices[0].used)

    def launch(self, name: str) -> None:
        """Launch kernel `name` of the last module loaded (one thread, a null pointer for its
        parameters, as the simulator runs nothing), and wait for it."""
        func = ptr()
        rc = cuda.cuModuleGetFunction(ctypes.byref(func), self.modules[-1], name.encode())
        out_ptr, n = ctypes.c_uint64(0), ctypes.c_int(0)
        args = (ptr * 2)(ctypes.addressof(out_ptr), ctypes.addressof(n))
        if rc == 0:
            rc = cuda.cuLaunchKernel(func, 1, 1, 1, 1, 1, 1, 0, None, args, None)
        if rc == 0:
            rc = cuda.cuCtxSynchronize()
        out("launch", rc)

    def module_unload(self) -> None:
        out("module-unload", cuda.cuModuleUnload(self.modules.pop()))

    def library_load(self, path: str) -> None:
        lib = ptr()
        rc = cuda.cuLibraryLoadFromFile(
            ctypes.byref(lib), path.encode(), None, None, 0, None, None, 0
        )
        if rc == 0:
            self.libraries.append(lib)
        out("library-load", rc)

    def library_load_wrapped(self, path: str) -> None:
        """cuLibraryLoadData of a fatbin in a wrapper, as libcudart 13 loads a kernel's module."""
        lib = ptr()
        with open(path, "rb") as f:
            image = ctypes.create_string_buffer(f.read())
        wrapper = FatbinWrapper(FATBIN_WRAPPER_MAGIC, 1, ctypes.addressof(image), None)
        self.wrapped.append((image, wrapper))  # libcudart keeps its images for the process
        rc = cuda.cuLibraryLoadData(
            ctypes.byref(lib), ctypes.byref(wrapper), None, None, 0, None, None, 0
        )
        if rc == 0:
            self.libraries.append(lib)
        out("library-load-wrapped", rc)

    def runtime_load(self, slot: str, path: str) -> None:
        """A module loaded as libcudart 12 loads its kernels: through the driver's private
        runtime table (cuGetExportTable), slot 1 or 6 with a fatbin wrapper, 8 with the fatbin."""
        table = ptr()
        rc = cuda.cuGetExportTable(ctypes.byref(table), bytes(CUDART_INTERFACE_ID))
        if rc != 0:
            out("runtime-load", rc)
            return
        entry = ctypes.cast(table, ctypes.POINTER(ptr))[int(slot)]
        with open(path, "rb") as f:
            image = ctypes.create_string_buffer(f.read())
        wrapper = FatbinWrapper(FATBIN_WRAPPER_MAGIC, 1, ctypes.addressof(image), None)
        self.wrapped.append((image, wrapper))  # libcudart keeps its images for the process
        mod = ptr()
        if slot == "1":
            load = ctypes.CFUNCTYPE(ctypes.c_int, ptr, ptr)(entry)
            rc = load(ctypes.addressof(mod), ctypes.addressof(wrapper))
        else:
            load = ctypes.CFUNCTYPE(ctypes.c_int, ptr, ptr, ptr, ptr, ctypes.c_uint)(entry)
            first, second = ctypes.addressof(mod), ctypes.addressof(wrapper)
            if slot == "8":
                first, second = ctypes.addressof(image), ctypes.addressof(mod)
            rc = load(first, second, None, None, 0)
        if rc == 0:
            self.modules.append(mod)
        out("runtime-load", rc)

    def library_global(self, name: str) -> None:
        p, size = u64(), ctypes.c_size_t()
        rc = cuda.cuLibraryGetGlobal(
            ctypes.byref(p), ctypes.byref(size), self.libraries[-1], name.encode()
        )
        out("library-global", rc, size.value)

    def library_unload(self) -> None:
        out("library-unload", cuda.cuLibraryUnload(self.libraries.pop()))

    def wait(self) -> None:
        """Block until a line arrives on stdin (another process does its part meanwhile)."""
        out("ready", 0)
        sys.stdin.readline()


STEPS = {
    "init": 0,
    "reset": 0,
    "usage": 0,
    "setlimit": 2,
    "getlimit": 1,
    "graph-alloc": 1,
    "graph-instantiate": 0,
    "graph-launch": 0,
    "graph-exec-destroy": 0,
    "graph-destroy": 0,
    "graph-trim": 0,
    "graph-reserved": 0,
    "capture-begin": 0,
    "capture-alloc": 1,
    "capture-free": 0,
    "capture-end": 0,
    "pool-create": 0,
    "pool-alloc": 1,
    "pool-free-all": 0,
    "pool-trim": 0,
    "pool-destroy": 0,
    "module-load": 1,
    "module-load-data": 1,
    "module-global": 1,
    "module-unload": 0,
    "launch": 1,
    "ledger": 0,
    "library-load": 1,
    "library-load-wrapped": 1,
    "runtime-load": 2,
    "library-global": 1,
    "library-unload": 0,
    "alloc": 1,
    "free": 0,
    "export": 0,
    "import": 1,
    "close": 0,
    "wait": 0,
}


def main(argv: list[str]) -> None:
    client = Client()
    i = 0
    while i < len(argv):
        step = argv[i]
        n = STEPS[step]
        method = getattr(client, step.replace("-", "_") + ("_" if step == "import" else ""))
        method(*argv[i + 1 : i + 1 + n])
        i += 1 + n


if __name__ == "__main__":
    main(sys.argv[1:])
