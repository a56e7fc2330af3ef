/* A driver stand-in for timing the shim: a tiny libcuda.so.1 whose alloc+free pair costs
 * about as much as a cheap driver's (20-30 ns), built differently from the simulator
 * (native/sim): no state file, no process-wide mutex, no per-context lists.
 *
 * One device (80 GiB, a fixed UUID), one primary context, the current context in a
 * thread-local.  Memory: sizes round up to a power of two (512 B at least); each size class
 * has its own 1 TiB region of addresses, handed out by a bump pointer and reused from a LIFO
 * of freed addresses, so a free finds its class from the address alone.  One spin lock (an
 * exchange) guards all of it.  Nothing touches memory at those addresses.
 *
 * Only the entry points that shim_bench and the shim's start-up use are here; the shim
 * reports any other one as missing (CUDA_ERROR_NOT_FOUND).  Not a simulator: there is no
 * check of a double free beyond "the address lies in a class region".
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define API __attribute__((visibility("default")))

#define TOTAL (80ULL << 30)
#define BASE (1ULL << 46)
#define CLASS_SHIFT 40
#define MIN_CLASS 9
#define MAX_CLASS 36 /* 64 GiB */
#define KEEP 4096    /* freed addresses kept per class; more are dropped (address space only) */

struct size_class {
    uint64_t next;          /* bump offset in the class's region */
    uint32_t nfree;
    uint64_t freed[KEEP];
};

static struct {
    int lock;
    int inited;
    uint64_t used;
    struct size_class cls[MAX_CLASS + 1];
} g;

struct ctx {
    uint32_t magic;
    int device;
};

static struct ctx primary = {0x5714d1u, 0};
static int primary_refs;
static __thread struct ctx *cur;

static inline void lock(void)
{
    while (__atomic_exchange_n(&g.lock, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&g.lock, __ATOMIC_RELAXED))
            __builtin_ia32_pause();
}

static inline void unlock(void)
{
    __atomic_store_n(&g.lock, 0, __ATOMIC_RELEASE);
}

static inline unsigned class_of(size_t bytes)
{
    if (bytes <= (1u << MIN_CLASS))
        return MIN_CLASS;
    return 64u - (unsigned)__builtin_clzll((unsigned long long)bytes - 1);
}

API CUresult cuInit(unsigned int flags)
{
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    __atomic_store_n(&g.inited, 1, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
}

#define NEED_INIT()                                                                                 \
    do {                                                                                           \
        if (!__atomic_load_n(&g.inited, __ATOMIC_ACQUIRE))                                         \
            return CUDA_ERROR_NOT_INITIALIZED;                                                     \
    } while (0)

API CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *n)
{
    NEED_INIT();
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = 1;
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    NEED_INIT();
    if (!d || ordinal != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = 0;
    return CUDA_SUCCESS;
}

static const unsigned char uuid[16] = {0x57, 0xa1, 0xd1, 0x00, 0xbe, 0x0c, 0x4a, 0x11,
                                       0x9e, 0x5e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01};

API CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
    NEED_INIT();
    if (!u || d != 0)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(u->bytes, uuid, 16);
    return CUDA_SUCCESS;
}

API CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d)
{
    return cuDeviceGetUuid(u, d);
}

API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d)
{
    NEED_INIT();
    if (!bytes || d != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = TOTAL;
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice d)
{
    NEED_INIT();
    if (!pctx || d != 0)
        return CUDA_ERROR_INVALID_VALUE;
    __atomic_add_fetch(&primary_refs, 1, __ATOMIC_RELAXED);
    *pctx = (CUcontext)&primary;
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
    NEED_INIT();
    if (d != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    __atomic_sub_fetch(&primary_refs, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active)
{
    NEED_INIT();
    if (d != 0 || !flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = 0;
    *active = __atomic_load_n(&primary_refs, __ATOMIC_RELAXED) > 0;
    return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(CUcontext c)
{
    NEED_INIT();
    if (c && ((struct ctx *)c)->magic != primary.magic)
        return CUDA_ERROR_INVALID_CONTEXT;
    cur = (struct ctx *)c;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetCurrent(CUcontext *c)
{
    NEED_INIT();
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    *c = (CUcontext)cur;
    return CUDA_SUCCESS;
}

API CUresult cuCtxGetDevice(CUdevice *d)
{
    NEED_INIT();
    if (!cur)
        return CUDA_ERROR_INVALID_CONTEXT;
    *d = cur->device;
    return CUDA_SUCCESS;
}

API CUresult cuCtxPushCurrent_v2(CUcontext c)
{
    return cuCtxSetCurrent(c); /* a stack one deep is enough for the shim's start-up */
}

API CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
    NEED_INIT();
    if (c)
        *c = (CUcontext)cur;
    cur = NULL;
    return CUDA_SUCCESS;
}

API CUresult cuCtxSynchronize(void)
{
    NEED_INIT();
    return cur ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
    if (__builtin_expect(!cur, 0))
        return __atomic_load_n(&g.inited, __ATOMIC_ACQUIRE) ? CUDA_ERROR_INVALID_CONTEXT
                                                            : CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || !bytes)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned c = class_of(bytes);
    if (c > MAX_CLASS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t size = 1ULL << c;
    struct size_class *k = &g.cls[c];
    lock();
    if (g.used + size > TOTAL) {
        unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t addr;
    if (k->nfree)
        addr = k->freed[--k->nfree];
    else if (k->next + size <= (1ULL << CLASS_SHIFT)) {
        addr = BASE + ((uint64_t)c << CLASS_SHIFT) + k->next;
        k->next += size;
    } else {
        unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g.used += size;
    unlock();
    *dptr = addr;
    return CUDA_SUCCESS;
}

API CUresult cuMemFree_v2(CUdeviceptr p)
{
    if (__builtin_expect(!cur, 0))
        return __atomic_load_n(&g.inited, __ATOMIC_ACQUIRE) ? CUDA_ERROR_INVALID_CONTEXT
                                                            : CUDA_ERROR_NOT_INITIALIZED;
    uint64_t c = (p - BASE) >> CLASS_SHIFT;
    if (p < BASE || c < MIN_CLASS || c > MAX_CLASS || (p & ((1ULL << c) - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    struct size_class *k = &g.cls[c];
    lock();
    if (k->nfree < KEEP)
        k->freed[k->nfree++] = p;
    g.used -= 1ULL << c;
    unlock();
    return CUDA_SUCCESS;
}

API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    if (!cur)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!free_bytes || !total)
        return CUDA_ERROR_INVALID_VALUE;
    *total = TOTAL;
    *free_bytes = TOTAL - __atomic_load_n(&g.used, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

/* cuGetProcAddress: a table of this library's own entry points (not dlsym: under the shim,
 * dlsym is the shim's and would hand back its wrappers). */
#define ENTRY(name) {#name, (void *)&name}
static const struct {
    const char *name;
    void *fn;
} procs[] = {
    ENTRY(cuInit), ENTRY(cuDriverGetVersion), ENTRY(cuDeviceGetCount), ENTRY(cuDeviceGet),
    ENTRY(cuDeviceGetUuid), ENTRY(cuDeviceGetUuid_v2), ENTRY(cuDeviceTotalMem_v2),
    ENTRY(cuDevicePrimaryCtxRetain), ENTRY(cuDevicePrimaryCtxRelease_v2),
    ENTRY(cuDevicePrimaryCtxGetState), ENTRY(cuCtxSetCurrent), ENTRY(cuCtxGetCurrent),
    ENTRY(cuCtxGetDevice), ENTRY(cuCtxPushCurrent_v2), ENTRY(cuCtxPopCurrent_v2),
    ENTRY(cuCtxSynchronize), ENTRY(cuMemAlloc_v2), ENTRY(cuMemFree_v2), ENTRY(cuMemGetInfo_v2),
};

/* The base names that have a _v2 above, asked for by base name and version. */
static const char *const versioned[] = {"cuDeviceTotalMem", "cuDevicePrimaryCtxRelease", "cuCtxPushCurrent",
                                        "cuCtxPopCurrent", "cuMemAlloc", "cuMemFree", "cuMemGetInfo"};

static void *lookup(const char *name)
{
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++)
        if (strcmp(procs[i].name, name) == 0)
            return procs[i].fn;
    return NULL;
}

API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status)
{
    (void)version;
    (void)flags;
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    void *f = NULL;
    for (size_t i = 0; i < sizeof versioned / sizeof versioned[0] && !f; i++)
        if (strcmp(versioned[i], symbol) == 0) {
            char v2[64];
            size_t n = strlen(symbol);
            memcpy(v2, symbol, n);
            memcpy(v2 + n, "_v2", 4);
            f = lookup(v2);
        }
    if (!f)
        f = lookup(symbol);
    *pfn = f;
    if (status)
        *status = f ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return f ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
