/* libcgpu.so: enforce a container's GPU memory slice inside every process.
 *
 * Interception: the exported wrappers (direct linking), dlsym (any handle,
 * RTLD_NEXT) and cuGetProcAddress v1/v2 all hand out the same wrappers, from
 * the one table in hooks.def.  Accounting: ledger.c.  Limits: limits.c.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cgpu_nvml.h"
#include "ledger.h"
#include "ptrtable.h"
#include "shim.h"

#define EXPORT __attribute__((visibility("default")))
/* Sanitizer runtimes call dlsym before they are set up: those paths stay uninstrumented. */
#define NO_SANITIZE __attribute__((no_sanitize("address", "thread", "undefined")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* ---- the hook table ------------------------------------------------------ */

enum hook_id {
#define HOOK(sym, base, ver, pt) H_##sym,
#include "hooks.def"
#undef HOOK
    H_COUNT
};

struct hook {
    const char *name;
    const char *base;
    int version;
    int per_thread;
    void *wrapper;
};

static const struct hook hooks[H_COUNT] = {
#define HOOK(sym, base, ver, pt) [H_##sym] = {#sym, #base, ver, pt, (void *)&sym},
#include "hooks.def"
#undef HOOK
};

static void *real_fns[H_COUNT];

/* NVML entry points we wrap, and their real addresses. */
enum { N_MEMINFO, N_MEMINFO_V2, N_COUNT };
static const char *const nvml_names[N_COUNT] = {"nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2"};
static void *nvml_real[N_COUNT];
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);
static void *const nvml_wrappers[N_COUNT] = {(void *)&nvmlDeviceGetMemoryInfo, (void *)&nvmlDeviceGetMemoryInfo_v2};

/* ---- real symbol resolution ---------------------------------------------- */

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn real_dlsym_ptr;

NO_SANITIZE static dlsym_fn real_dlsym(void)
{
    dlsym_fn f = __atomic_load_n(&real_dlsym_ptr, __ATOMIC_RELAXED);
    if (likely(f))
        return f;
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0] && !f; i++)
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    __atomic_store_n(&real_dlsym_ptr, f, __ATOMIC_RELAXED);
    return f;
}

static void *lib_handle(const char *soname, void **cache, int load)
{
    void *h = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (h)
        return h;
    h = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
    if (!h && load)
        h = dlopen(soname, RTLD_LAZY);
    if (h)
        __atomic_store_n(cache, h, __ATOMIC_RELEASE);
    return h;
}

static void *cuda_handle_cache, *nvml_handle_cache;

void *shim_driver_sym(const char *name)
{
    void *h = lib_handle("libcuda.so.1", &cuda_handle_cache, 1);
    dlsym_fn rd = real_dlsym();
    return h && rd ? rd(h, name) : NULL;
}

/* The driver's own `name`, only if the program has loaded the driver already. */
static void *loaded_driver_sym(const char *name)
{
    void *h = lib_handle("libcuda.so.1", &cuda_handle_cache, 0);
    dlsym_fn rd = real_dlsym();
    return h && rd ? rd(h, name) : NULL;
}

void *shim_nvml_sym(const char *name)
{
    void *h = lib_handle("libnvidia-ml.so.1", &nvml_handle_cache, 1);
    dlsym_fn rd = real_dlsym();
    return h && rd ? rd(h, name) : NULL;
}

static void record_real(int id, void *p)
{
    if (p && p != hooks[id].wrapper)
        __atomic_store_n(&real_fns[id], p, __ATOMIC_RELAXED);
}

static void *resolve_real(int id)
{
    void *p = shim_driver_sym(hooks[id].name);
    if (p == hooks[id].wrapper)
        p = NULL;
    record_real(id, p);
    return p;
}

static inline void *real_fn(int id)
{
    void *p = __atomic_load_n(&real_fns[id], __ATOMIC_RELAXED);
    return likely(p != NULL) ? p : resolve_real(id);
}

/* Call the real driver function `sym`; a missing one reports CUDA_ERROR_NOT_FOUND. */
#define REAL(sym) ((__typeof__(&sym))real_or_missing(H_##sym))

static CUresult missing_fn(void)
{
    return CUDA_ERROR_NOT_FOUND;
}

static inline void *real_or_missing(int id)
{
    void *p = real_fn(id);
    return likely(p != NULL) ? p : (void *)&missing_fn;
}

static void *nvml_real_fn(int id)
{
    void *p = __atomic_load_n(&nvml_real[id], __ATOMIC_RELAXED);
    if (!p) {
        p = shim_nvml_sym(nvml_names[id]);
        if (p == nvml_wrappers[id])
            p = NULL;
        __atomic_store_n(&nvml_real[id], p, __ATOMIC_RELAXED);
    }
    return p;
}

/* ---- process state ---------------------------------------------------------- */

static struct ptrtable g_table; /* guarded by the ledger lock */

/* Ledger index of the calling thread's current device: -1 when that device
 * has no slice, -2 when there is no current context. */
static inline int current_device(void)
{
    int single = g_shim.single_device;
    if (likely(single != SHIM_MULTI_DEVICE))
        return single;
    CUdevice d;
    if (!g_shim.ctx_get_device || g_shim.ctx_get_device(&d) != CUDA_SUCCESS)
        return -2;
    return (d >= 0 && d < SHIM_MAX_ORDINALS) ? g_shim.devmap[d] : -1;
}

static inline int device_of_ordinal(CUdevice d)
{
    return (d >= 0 && d < SHIM_MAX_ORDINALS) ? g_shim.devmap[d] : -1;
}

/* SHIM_LIMITED, SHIM_PASSTHROUGH, SHIM_FAILED, or SHIM_UNINIT while a limit
 * applies but the driver is not initialised; initialises on first use. */
static inline int mode(void)
{
    int s = __atomic_load_n(&g_shim.state, __ATOMIC_ACQUIRE);
    if (likely(s == SHIM_LIMITED))
        return s;
    if (s == SHIM_UNINIT)
        s = shim_cuda_init(0);
    return s;
}

/* ---- charging ------------------------------------------------------------ */

#define MiB (1ULL << 20)

/* What an allocation of `bytes` really takes: large ones occupy whole 2 MiB
 * pages, small ones are packed by the driver at 512-byte alignment. */
static inline uint64_t charge_of(uint64_t bytes)
{
    if (bytes >= MiB)
        return (bytes + 2 * MiB - 1) & ~(2 * MiB - 1);
    return (bytes + 511) & ~511ULL;
}

static void report_oom(int dev, uint64_t bytes)
{
    struct ledger *l = g_shim.ledger.l;
    fprintf(stderr,
            "cgpu: out of GPU memory slice on %s: requested %llu bytes, %llu of %llu in use (CUDA_ERROR_OUT_OF_MEMORY)\n",
            l->devices[dev].uuid, (unsigned long long)bytes, (unsigned long long)ledger_used(l, (unsigned)dev),
            (unsigned long long)l->devices[dev].limit);
}

/* Reserve `charge` on `dev` before calling the driver. */
static CUresult reserve(int dev, uint64_t charge)
{
    if (unlikely(__atomic_load_n(&g_shim.ledger.slot, __ATOMIC_RELAXED) < 0) && shim_claim_slot() != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (likely(ledger_charge(&g_shim.ledger, (unsigned)dev, charge, 0) == CGPU_OK))
        return CUDA_SUCCESS;
    /* Slow path: free what dead processes held, then try once more. */
    if (ledger_sweep(&g_shim.ledger) > 0 && ledger_charge(&g_shim.ledger, (unsigned)dev, charge, 0) == CGPU_OK)
        return CUDA_SUCCESS;
    report_oom(dev, charge);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static void unreserve(int dev, uint64_t charge)
{
    ledger_credit(&g_shim.ledger, (unsigned)dev, charge);
}

/* The calling thread's context: the driver frees a context's memory with it. */
static inline void *current_context(void)
{
    void *ctx = NULL;
    if (g_shim.ctx_get_current)
        g_shim.ctx_get_current(&ctx);
    return ctx;
}

static void track(uint64_t key, int dev, uint64_t charge, void *ctx)
{
    struct ledger *l = g_shim.ledger.l;
    /* If the table cannot grow, the entry is lost but the charge stays (until the
     * process ends): an allocation we cannot credit is over-counted, never under. */
    ledger_lock(l);
    (void)pt_insert(&g_table, key, (unsigned)dev, charge, ctx);
    ledger_unlock(l);
}

/* Credit `charge` on `dev` to this process's slot.  Caller holds the ledger lock. */
static void credit_locked(uint64_t key, unsigned dev, uint64_t charge)
{
    (void)key;
    struct ledger *l = g_shim.ledger.l;
    int slot = __atomic_load_n(&g_shim.ledger.slot, __ATOMIC_RELAXED);
    if (slot < 0)
        return; /* the slot was given back at exit already */
    uint64_t *mine = &l->slots[slot].used[dev];
    uint64_t c = charge > *mine ? *mine : charge;
    *mine -= c;
    __atomic_store_n(&l->devices[dev].used, l->devices[dev].used - c, __ATOMIC_RELAXED);
}

/* A tracked object, taken out of the table with its charge credited. */
struct untracked {
    int dev;
    uint64_t charge;
    void *ctx;
};

/* Forget `key` and credit its charge; returns whether it was known. */
static int untrack(uint64_t key, struct untracked *out)
{
    struct ledger *l = g_shim.ledger.l;
    unsigned dev;
    ledger_lock(l);
    int found = pt_remove(&g_table, key, &dev, &out->charge, &out->ctx);
    if (found)
        credit_locked(key, dev, out->charge);
    ledger_unlock(l);
    out->dev = (int)dev;
    return found;
}

/* Put back what untrack took when the driver refused the free (unless the slot
 * was already given back at exit: then nothing may be charged). */
static void retrack(uint64_t key, const struct untracked *u)
{
    if (ledger_charge(&g_shim.ledger, (unsigned)u->dev, u->charge, 1) == CGPU_OK)
        track(key, u->dev, u->charge, u->ctx);
}

/* The common shape of every allocation wrapper. */
#define CHARGED_ALLOC(dev_expr, bytes_expr, call, key_expr, ctx_expr)           \
    do {                                                                       \
        int m_ = mode();                                                       \
        if (unlikely(m_ == SHIM_FAILED || m_ == SHIM_UNINIT))                  \
            return CUDA_ERROR_NOT_INITIALIZED;                                 \
        int dev_ = m_ == SHIM_LIMITED ? (dev_expr) : -1;                       \
        if (dev_ < 0)                                                          \
            return call;                                                       \
        uint64_t charge_ = (bytes_expr);                                       \
        CUresult rc_ = reserve(dev_, charge_);                                 \
        if (rc_ != CUDA_SUCCESS)                                               \
            return rc_;                                                        \
        rc_ = call;                                                            \
        if (rc_ == CUDA_SUCCESS)                                               \
            track((key_expr), dev_, charge_, (ctx_expr));                      \
        else                                                                   \
            unreserve(dev_, charge_);                                          \
        return rc_;                                                            \
    } while (0)

#define CHARGED_FREE(key_expr, call)                                           \
    do {                                                                       \
        struct untracked u_;                                                   \
        if (mode() != SHIM_LIMITED || !untrack((key_expr), &u_))               \
            return call;                                                       \
        CUresult rc_ = call;                                                   \
        if (unlikely(rc_ != CUDA_SUCCESS))                                     \
            retrack((key_expr), &u_);                                          \
        return rc_;                                                            \
    } while (0)

/* ---- allocation families ------------------------------------------------------ */

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CHARGED_ALLOC(current_device(), charge_of(bytesize), REAL(cuMemAlloc_v2)(dptr, bytesize), PT_KIND_PTR ^ *dptr, current_context());
}

EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    CHARGED_ALLOC(current_device(), charge_of(bytesize), REAL(cuMemAlloc)(dptr, bytesize), PT_KIND_PTR ^ *dptr, current_context());
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                   unsigned int ElementSizeBytes)
{
    CHARGED_ALLOC(current_device(), charge_of(((WidthInBytes + 511) & ~(size_t)511) * Height),
                  REAL(cuMemAllocPitch_v2)(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes),
                  PT_KIND_PTR ^ *dptr, current_context());
}

EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
                                unsigned int Height, unsigned int ElementSizeBytes)
{
    CHARGED_ALLOC(current_device(), charge_of(((uint64_t)(WidthInBytes + 511) & ~511ULL) * Height),
                  REAL(cuMemAllocPitch)(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes),
                  PT_KIND_PTR ^ *dptr, current_context());
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    CHARGED_ALLOC(current_device(), charge_of(bytesize), REAL(cuMemAllocManaged)(dptr, bytesize, flags),
                  PT_KIND_PTR ^ *dptr, current_context());
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CHARGED_FREE(PT_KIND_PTR ^ dptr, REAL(cuMemFree_v2)(dptr));
}

EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    CHARGED_FREE(PT_KIND_PTR ^ dptr, REAL(cuMemFree)(dptr));
}

/* Virtual memory management: the device comes from prop->location, never from
 * the current context (worker threads may have none), and only memory located
 * on a device is charged. */
static int vmm_device(const CUmemAllocationProp *prop)
{
    if (!prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return -1;
    return device_of_ordinal(prop->location.id);
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                            unsigned long long flags)
{
    int m = mode();
    if (unlikely(m == SHIM_FAILED || m == SHIM_UNINIT))
        return CUDA_ERROR_NOT_INITIALIZED;
    int dev = m == SHIM_LIMITED ? vmm_device(prop) : -1;
    if (dev < 0)
        return REAL(cuMemCreate)(handle, size, prop, flags);
    CUresult rc = reserve(dev, size);
    if (rc != CUDA_SUCCESS)
        return rc;
    rc = REAL(cuMemCreate)(handle, size, prop, flags);
    if (rc != CUDA_SUCCESS) {
        unreserve(dev, size);
        return rc;
    }
    track(PT_KIND_HANDLE ^ *handle, dev, size, NULL);
    struct ledger *l = g_shim.ledger.l;
    ledger_lock(l);
    struct pt_entry *e = pt_find(&g_table, PT_KIND_HANDLE ^ *handle);
    if (e)
        e->aux = 1; /* the handle's own reference */
    ledger_unlock(l);
    return rc;
}

/* Drop one reference of a handle's memory: the driver frees it (and we credit it)
 * once the handle is released and every mapping of it is gone.  Caller holds the
 * ledger lock. */
static void handle_unref_locked(CUmemGenericAllocationHandle handle)
{
    uint64_t key = PT_KIND_HANDLE ^ handle, bytes;
    struct pt_entry *e = pt_find(&g_table, key);
    unsigned dev;
    if (e && e->aux > 1) {
        e->aux--;
        return;
    }
    if (e && pt_remove(&g_table, key, &dev, &bytes, NULL))
        credit_locked(key, dev, bytes);
}

static int handle_ref_locked(CUmemGenericAllocationHandle handle)
{
    struct pt_entry *e = pt_find(&g_table, PT_KIND_HANDLE ^ handle);
    if (e)
        e->aux++;
    return e != NULL;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    if (mode() != SHIM_LIMITED)
        return REAL(cuMemRelease)(handle);
    struct ledger *l = g_shim.ledger.l;
    /* Drop our reference first: once the driver frees the handle it may hand the same
     * value to another thread's cuMemCreate. */
    ledger_lock(l);
    struct pt_entry *e = pt_find(&g_table, PT_KIND_HANDLE ^ handle);
    struct pt_entry saved = e ? *e : (struct pt_entry){0};
    if (e)
        handle_unref_locked(handle);
    ledger_unlock(l);
    CUresult rc = REAL(cuMemRelease)(handle);
    if (rc != CUDA_SUCCESS && saved.key) { /* refused: put the reference back */
        ledger_lock(l);
        if (!handle_ref_locked(handle)) {
            ledger_unlock(l);
            unsigned dev = pt_entry_dev(&saved);
            if (ledger_charge(&g_shim.ledger, dev, pt_entry_bytes(&saved), 1) == CGPU_OK)
                track(saved.key, (int)dev, pt_entry_bytes(&saved), NULL);
            ledger_lock(l);
            struct pt_entry *back = pt_find(&g_table, saved.key);
            if (back)
                back->aux = 1;
        }
        ledger_unlock(l);
    }
    return rc;
}

/* A mapping holds its handle's memory until it is unmapped. */
EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                         unsigned long long flags)
{
    CUresult rc = REAL(cuMemMap)(ptr, size, offset, handle, flags);
    if (rc != CUDA_SUCCESS || mode() != SHIM_LIMITED)
        return rc;
    struct ledger *l = g_shim.ledger.l;
    ledger_lock(l);
    if (handle_ref_locked(handle) && pt_insert(&g_table, PT_KIND_MAP ^ ptr, 0, size, NULL) == 0) {
        struct pt_entry *m = pt_find(&g_table, PT_KIND_MAP ^ ptr);
        m->aux = handle;
    }
    ledger_unlock(l);
    return rc;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult rc = REAL(cuMemUnmap)(ptr, size);
    if (rc != CUDA_SUCCESS || mode() != SHIM_LIMITED)
        return rc;
    struct ledger *l = g_shim.ledger.l;
    ledger_lock(l);
    /* The common case is one whole mapping; a range may cover several. */
    uint64_t key = pt_find(&g_table, PT_KIND_MAP ^ ptr) ? PT_KIND_MAP ^ ptr
                                                         : pt_find_range(&g_table, PT_KIND_MAP, ptr, ptr + size);
    while (key) {
        struct pt_entry *m = pt_find(&g_table, key);
        CUmemGenericAllocationHandle handle = m->aux;
        uint64_t bytes;
        unsigned dev;
        pt_remove(&g_table, key, &dev, &bytes, NULL);
        handle_unref_locked(handle);
        key = pt_find_range(&g_table, PT_KIND_MAP, ptr, ptr + size);
    }
    ledger_unlock(l);
    return rc;
}

EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult rc = REAL(cuMemRetainAllocationHandle)(handle, addr);
    if (rc == CUDA_SUCCESS && handle && mode() == SHIM_LIMITED) {
        struct ledger *l = g_shim.ledger.l;
        ledger_lock(l);
        handle_ref_locked(*handle);
        ledger_unlock(l);
    }
    return rc;
}

/* Stream-ordered allocation: charged at allocation, credited at the free call.
 *
 * A pool or a stream may belong to another device than the current context's.  A
 * process that sees one device cannot get that wrong; with several, the device is
 * read from the new pointer and the charge made afterwards: over the slice, the
 * memory is handed back to the pool and the call fails. */
static CUresult charge_async_after(CUresult rc, CUdeviceptr *dptr, size_t bytesize, CUstream stream,
                                   CUresult (*free_async)(CUdeviceptr, CUstream))
{
    if (rc != CUDA_SUCCESS)
        return rc;
    CUresult (*attr)(void *, CUpointer_attribute, CUdeviceptr) =
        (CUresult(*)(void *, CUpointer_attribute, CUdeviceptr))shim_driver_sym("cuPointerGetAttribute");
    int ordinal = -1;
    if (!attr || attr(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, *dptr) != CUDA_SUCCESS)
        ordinal = -1;
    int dev = ordinal >= 0 ? device_of_ordinal(ordinal) : current_device();
    if (dev < 0)
        return rc;
    uint64_t charge = charge_of(bytesize);
    if (reserve(dev, charge) != CUDA_SUCCESS) {
        free_async(*dptr, stream);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    track(PT_KIND_PTR ^ *dptr, dev, charge, NULL);
    return rc;
}

#define ASYNC_ALLOC(call, free_fn)                                                                  \
    do {                                                                                           \
        int m_ = mode();                                                                           \
        if (m_ == SHIM_LIMITED && g_shim.single_device == SHIM_MULTI_DEVICE)                        \
            return charge_async_after(call, dptr, bytesize, hStream, free_fn);                     \
        CHARGED_ALLOC(current_device(), charge_of(bytesize), call, PT_KIND_PTR ^ *dptr, NULL);     \
    } while (0)

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    ASYNC_ALLOC(REAL(cuMemAllocAsync)(dptr, bytesize, hStream), REAL(cuMemFreeAsync));
}

EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    ASYNC_ALLOC(REAL(cuMemAllocAsync_ptsz)(dptr, bytesize, hStream), REAL(cuMemFreeAsync_ptsz));
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    ASYNC_ALLOC(REAL(cuMemAllocFromPoolAsync)(dptr, bytesize, pool, hStream), REAL(cuMemFreeAsync));
}

EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream)
{
    ASYNC_ALLOC(REAL(cuMemAllocFromPoolAsync_ptsz)(dptr, bytesize, pool, hStream), REAL(cuMemFreeAsync_ptsz));
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    CHARGED_FREE(PT_KIND_PTR ^ dptr, REAL(cuMemFreeAsync)(dptr, hStream));
}

EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    CHARGED_FREE(PT_KIND_PTR ^ dptr, REAL(cuMemFreeAsync_ptsz)(dptr, hStream));
}

/* Arrays: the size follows from the descriptor. */
static uint64_t format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        return 4;
    default:
        return 16; /* packed, block-compressed and video formats: charge generously */
    }
}

/* Bytes of an array: each mipmap level halves width, height and depth, but not
 * the layer count of a layered array. */
static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t d, CUarray_format f, unsigned channels,
                            unsigned levels, unsigned flags)
{
    uint64_t total = 0;
    int layered = (flags & CUDA_ARRAY3D_LAYERED) != 0;
    if (levels == 0)
        levels = 1;
    for (unsigned l = 0; l < levels && l < 64; l++) {
        uint64_t lw = w >> l ? w >> l : 1, lh = h >> l ? h >> l : 1;
        uint64_t ld = layered ? (d ? d : 1) : (d >> l ? d >> l : 1);
        total += lw * lh * ld;
    }
    return charge_of(total * format_bytes(f) * (channels ? channels : 1));
}

EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    CHARGED_ALLOC(current_device(), desc ? array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels, 1, 0) : 0,
                  REAL(cuArrayCreate_v2)(pHandle, desc), PT_KIND_ARRAY ^ (uint64_t)(uintptr_t)*pHandle, current_context());
}

EXPORT CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *desc)
{
    CHARGED_ALLOC(current_device(), desc ? array_bytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels, 1, 0) : 0,
                  REAL(cuArrayCreate)(pHandle, desc), PT_KIND_ARRAY ^ (uint64_t)(uintptr_t)*pHandle, current_context());
}

EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    CHARGED_ALLOC(current_device(),
                  desc ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels, 1, desc->Flags) : 0,
                  REAL(cuArray3DCreate_v2)(pHandle, desc), PT_KIND_ARRAY ^ (uint64_t)(uintptr_t)*pHandle, current_context());
}

EXPORT CUresult cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc)
{
    CHARGED_ALLOC(current_device(),
                  desc ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels, 1, desc->Flags) : 0,
                  REAL(cuArray3DCreate)(pHandle, desc), PT_KIND_ARRAY ^ (uint64_t)(uintptr_t)*pHandle, current_context());
}

EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                       unsigned int numMipmapLevels)
{
    CHARGED_ALLOC(current_device(),
                  desc ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels,
                                     numMipmapLevels, desc->Flags)
                       : 0,
                  REAL(cuMipmappedArrayCreate)(pHandle, desc, numMipmapLevels),
                  PT_KIND_MIPMAP ^ (uint64_t)(uintptr_t)*pHandle, current_context());
}

EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
    CHARGED_FREE(PT_KIND_ARRAY ^ (uint64_t)(uintptr_t)hArray, REAL(cuArrayDestroy)(hArray));
}

EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    CHARGED_FREE(PT_KIND_MIPMAP ^ (uint64_t)(uintptr_t)hMipmappedArray, REAL(cuMipmappedArrayDestroy)(hMipmappedArray));
}

/* ---- contexts: their overhead, and the memory that dies with them ------------- */

static CUcontext g_primary[SHIM_MAX_ORDINALS]; /* each device's primary context */

/* A device's context overhead is charged while it has at least one live context of
 * this process: on the first context's creation, and given back with the last. */
static int context_opening(int dev)
{
    return dev >= 0 && __atomic_load_n(&g_shim.contexts[dev], __ATOMIC_ACQUIRE) == 0;
}

/* After the driver made a new context `ctx` on `ordinal`: remember its device, and
 * charge the device's context overhead if it is the first.  Context creation never
 * fails because of the charge: over the slice, the next allocation will. */
static void context_created(CUdevice ordinal, CUcontext ctx)
{
    int dev = device_of_ordinal(ordinal);
    if (dev < 0 || !ctx)
        return;
    track(PT_KIND_CTXDEV ^ (uint64_t)(uintptr_t)ctx, dev, 0, NULL);
    if (__atomic_fetch_add(&g_shim.contexts[dev], 1, __ATOMIC_ACQ_REL) != 0)
        return;
    uint64_t overhead = shim_context_overhead(dev);
    if (overhead && ledger_charge(&g_shim.ledger, (unsigned)dev, overhead, 1) == CGPU_OK)
        track(PT_KIND_CONTEXT ^ (uint64_t)dev, dev, overhead, NULL);
}

/* The driver destroyed `ctx`: credit the memory allocated in it, and the device's
 * context overhead if it was the last. */
static void context_destroyed(void *ctx)
{
    if (!ctx || mode() != SHIM_LIMITED)
        return;
    struct ledger *l = g_shim.ledger.l;
    uint64_t bytes;
    unsigned dev;
    ledger_lock(l);
    if (pt_remove(&g_table, PT_KIND_CTXDEV ^ (uint64_t)(uintptr_t)ctx, &dev, &bytes, NULL) &&
        __atomic_fetch_sub(&g_shim.contexts[dev], 1, __ATOMIC_ACQ_REL) == 1) {
        uint64_t key = PT_KIND_CONTEXT ^ (uint64_t)dev;
        if (pt_remove(&g_table, key, &dev, &bytes, NULL))
            credit_locked(key, dev, bytes);
    }
    pt_remove_context(&g_table, ctx, credit_locked);
    ledger_unlock(l);
}

/* Whether the primary context of `ordinal` is not yet known to be alive. */
static int primary_unknown(CUdevice ordinal)
{
    return ordinal >= 0 && ordinal < SHIM_MAX_ORDINALS && !__atomic_load_n(&g_primary[ordinal], __ATOMIC_ACQUIRE);
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    int limited = mode() == SHIM_LIMITED, fresh = limited && primary_unknown(dev);
    if (fresh && context_opening(device_of_ordinal(dev)))
        shim_context_overhead_before(device_of_ordinal(dev));
    CUresult rc = REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    /* Retains are counted by the driver: only the first makes a context. */
    if (rc == CUDA_SUCCESS && fresh && pctx &&
        __atomic_exchange_n(&g_primary[dev], *pctx, __ATOMIC_ACQ_REL) == NULL)
        context_created(dev, *pctx);
    return rc;
}

/* Around the creation of a new (non-primary) context. */
static void before_create(CUdevice ordinal)
{
    if (mode() == SHIM_LIMITED && context_opening(device_of_ordinal(ordinal)))
        shim_context_overhead_before(device_of_ordinal(ordinal));
}

static CUresult after_create(CUresult rc, CUcontext *pctx, CUdevice ordinal)
{
    if (rc == CUDA_SUCCESS && pctx && mode() == SHIM_LIMITED)
        context_created(ordinal, *pctx);
    return rc;
}

EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    before_create(dev);
    return after_create(REAL(cuCtxCreate)(pctx, flags, dev), pctx, dev);
}

EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    before_create(dev);
    return after_create(REAL(cuCtxCreate_v2)(pctx, flags, dev), pctx, dev);
}

EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,
                               CUdevice dev)
{
    before_create(dev);
    return after_create(REAL(cuCtxCreate_v3)(pctx, paramsArray, numParams, flags, dev), pctx, dev);
}

EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    before_create(dev);
    return after_create(REAL(cuCtxCreate_v4)(pctx, params, flags, dev), pctx, dev);
}

/* After a call that may have destroyed a context: credit what died with it. */
static CUresult destroyed_if(CUresult rc, CUcontext ctx)
{
    if (rc == CUDA_SUCCESS)
        context_destroyed(ctx);
    return rc;
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    return destroyed_if(REAL(cuCtxDestroy_v2)(ctx), ctx);
}

EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
    return destroyed_if(REAL(cuCtxDestroy)(ctx), ctx);
}

static int primary_active(CUdevice ordinal)
{
    CUresult (*state)(CUdevice, unsigned int *, int *) =
        (CUresult(*)(CUdevice, unsigned int *, int *))shim_driver_sym("cuDevicePrimaryCtxGetState");
    unsigned int flags;
    int active = 1;
    if (state && state(ordinal, &flags, &active) != CUDA_SUCCESS)
        active = 1; /* cannot tell: keep the charges */
    return active;
}

/* After a reset or release of `ordinal`'s primary context: if it is gone, credit
 * what died with it. */
static CUresult primary_gone_if(CUresult rc, CUdevice ordinal, int released)
{
    if (rc != CUDA_SUCCESS || ordinal < 0 || ordinal >= SHIM_MAX_ORDINALS)
        return rc;
    if (released && primary_active(ordinal))
        return rc; /* other retains keep it alive */
    context_destroyed(__atomic_exchange_n(&g_primary[ordinal], NULL, __ATOMIC_RELAXED));
    return rc;
}

EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    return primary_gone_if(REAL(cuDevicePrimaryCtxReset_v2)(dev), dev, 0);
}

EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return primary_gone_if(REAL(cuDevicePrimaryCtxReset)(dev), dev, 0);
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    return primary_gone_if(REAL(cuDevicePrimaryCtxRelease_v2)(dev), dev, 1);
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return primary_gone_if(REAL(cuDevicePrimaryCtxRelease)(dev), dev, 1);
}

/* ---- what the program sees ------------------------------------------------------ */

/* Other processes may have been killed since we last looked: at most once a
 * millisecond, and only when others share the ledger, free their slots. */
static void sweep_if_shared(void)
{
    static uint64_t last_ms;
    struct ledger *l = g_shim.ledger.l;
    unsigned mine = __atomic_load_n(&g_shim.ledger.slot, __ATOMIC_RELAXED) >= 0;
    if (__atomic_load_n(&l->active, __ATOMIC_RELAXED) <= mine)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); /* vDSO: no syscall */
    uint64_t now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    if (__atomic_exchange_n(&last_ms, now, __ATOMIC_RELAXED) == now)
        return;
    ledger_sweep(&g_shim.ledger);
}

/* free = min(slice - use, device free); total = slice. */
static void truncate_info(int dev, uint64_t *freep, uint64_t *totalp)
{
    struct ledger *l = g_shim.ledger.l;
    sweep_if_shared();
    uint64_t limit = l->devices[dev].limit, used = ledger_used(l, (unsigned)dev);
    uint64_t left = used >= limit ? 0 : limit - used;
    *totalp = limit;
    if (*freep > left)
        *freep = left;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    CUresult rc = REAL(cuMemGetInfo_v2)(free, total);
    int dev;
    if (rc != CUDA_SUCCESS || mode() != SHIM_LIMITED || (dev = current_device()) < 0 || !free || !total)
        return rc;
    uint64_t f = *free, t = *total;
    truncate_info(dev, &f, &t);
    *free = (size_t)f;
    *total = (size_t)t;
    return rc;
}

EXPORT CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    CUresult rc = REAL(cuMemGetInfo)(free, total);
    int dev;
    if (rc != CUDA_SUCCESS || mode() != SHIM_LIMITED || (dev = current_device()) < 0 || !free || !total)
        return rc;
    uint64_t f = *free, t = *total;
    truncate_info(dev, &f, &t);
    *free = f > 0xFFFFFFFFu ? 0xFFFFFFFFu : (unsigned)f;
    *total = t > 0xFFFFFFFFu ? 0xFFFFFFFFu : (unsigned)t;
    return rc;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult rc = REAL(cuDeviceTotalMem_v2)(bytes, dev);
    int d;
    if (rc == CUDA_SUCCESS && bytes && mode() == SHIM_LIMITED && (d = device_of_ordinal(dev)) >= 0)
        *bytes = (size_t)g_shim.ledger.l->devices[d].limit;
    return rc;
}

EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    CUresult rc = REAL(cuDeviceTotalMem)(bytes, dev);
    int d;
    if (rc == CUDA_SUCCESS && bytes && mode() == SHIM_LIMITED && (d = device_of_ordinal(dev)) >= 0) {
        uint64_t limit = g_shim.ledger.l->devices[d].limit;
        *bytes = limit > 0xFFFFFFFFu ? 0xFFFFFFFFu : (unsigned)limit;
    }
    return rc;
}

/* cuInit is where a malformed limit fails closed. */
EXPORT CUresult cuInit(unsigned int Flags)
{
    CUresult rc = REAL(cuInit)(Flags);
    if (rc != CUDA_SUCCESS)
        return rc;
    return shim_cuda_init(1) == SHIM_FAILED ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ---- cuGetProcAddress ------------------------------------------------------------ */

/* Which hooked variant the driver handed out for `symbol`: by address when we
 * know it, else by the driver's own rule (newest version <= cudaVersion, the
 * per-thread variant when asked for). */
static int pick_variant(const char *symbol, void *fn, int version, cuuint64_t flags)
{
    int best = -1, any = 0;
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    for (int pass = 0; pass < 2 && best < 0; pass++) {
        for (int i = 0; i < H_COUNT; i++) {
            if (strcmp(hooks[i].base, symbol) != 0) {
                if (pass == 0 && strcmp(hooks[i].name, symbol) == 0)
                    return i;
                continue;
            }
            any = 1;
            if (pass == 0) {
                void *r = real_fn(i); /* the exported variant, looked up in the driver */
                if (r && r == fn)
                    return i;
                continue;
            }
            if (hooks[i].version > version || hooks[i].per_thread != per_thread)
                continue;
            if (best < 0 || hooks[i].version > hooks[best].version)
                best = i;
        }
        if (pass == 1 && best < 0 && per_thread) {
            per_thread = 0; /* no per-thread variant: the driver gives the plain one */
            pass = 0;
        }
    }
    return any ? best : -1;
}

static void swap_in_wrapper(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    if (!symbol || !pfn || !*pfn || symbol[0] != 'c' || symbol[1] != 'u')
        return;
    int id = pick_variant(symbol, *pfn, version, flags);
    if (id < 0)
        return;
    record_real(id, *pfn);
    *pfn = hooks[id].wrapper;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *symbolStatus)
{
    CUresult rc = REAL(cuGetProcAddress_v2)(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (rc == CUDA_SUCCESS)
        swap_in_wrapper(symbol, pfn, cudaVersion, flags);
    return rc;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    CUresult rc = REAL(cuGetProcAddress)(symbol, pfn, cudaVersion, flags);
    if (rc == CUDA_SUCCESS)
        swap_in_wrapper(symbol, pfn, cudaVersion, flags);
    return rc;
}

/* ---- dlsym -------------------------------------------------------------------------- */

static int find_hook(const char *name)
{
    for (int i = 0; i < H_COUNT; i++)
        if (strcmp(hooks[i].name, name) == 0)
            return i;
    return -1;
}

static int find_nvml(const char *name)
{
    for (int i = 0; i < N_COUNT; i++)
        if (strcmp(nvml_names[i], name) == 0)
            return i;
    return -1;
}

/* Hand out the wrapper for a hooked name, remembering the real address. */
static __attribute__((noinline)) void *dlsym_hooked(void *handle, const char *name, int *matched)
{
    int id = find_hook(name), nid = id < 0 ? find_nvml(name) : -1;
    *matched = id >= 0 || nid >= 0;
    if (!*matched)
        return NULL;
    void *r = real_dlsym()(handle, name);
    if (!r)
        return NULL;
    if (id >= 0) {
        if (r == hooks[id].wrapper) { /* the global scope found us: the driver, if loaded */
            r = loaded_driver_sym(name);
            if (r == hooks[id].wrapper)
                r = NULL;
        }
        record_real(id, r);
        return r ? hooks[id].wrapper : NULL;
    }
    if (r != nvml_wrappers[nid])
        __atomic_store_n(&nvml_real[nid], r, __ATOMIC_RELAXED);
    else if (!nvml_real_fn(nid))
        return NULL;
    return nvml_wrappers[nid];
}

#if defined(__GNUC__) && !defined(__clang__)
#define SIBLING_CALLS __attribute__((optimize("optimize-sibling-calls")))
#else
#define SIBLING_CALLS
#endif

/* Everything that is not ours is a tail call, so that glibc still sees the
 * caller's return address and RTLD_NEXT keeps its meaning. */
EXPORT SIBLING_CALLS NO_SANITIZE void *dlsym(void *handle, const char *name)
{
    const char *volatile n = name; /* glibc declares it nonnull; callers still pass NULL */
    if (n && ((n[0] == 'c' && n[1] == 'u') || (n[0] == 'n' && n[1] == 'v' && n[2] == 'm'))) {
        int matched;
        void *w = dlsym_hooked(handle, name, &matched);
        if (matched)
            return w;
    }
    return real_dlsym()(handle, name);
}

/* ---- NVML: what nvidia-smi in the container shows ------------------------------ */

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    nvmlReturn_t (*real)(nvmlDevice_t, nvmlMemory_t *) = (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))nvml_real_fn(N_MEMINFO);
    if (!real)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t rc = real(device, memory);
    if (rc != NVML_SUCCESS || !memory)
        return rc;
    uint64_t limit, used;
    switch (shim_nvml_view(device, &limit, &used)) {
    case SHIM_FAILED:
        return NVML_ERROR_UNKNOWN;
    case SHIM_LIMITED:
        memory->total = limit;
        memory->used = used;
        memory->free = used >= limit ? 0 : limit - used;
        break;
    default:
        break;
    }
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    nvmlReturn_t (*real)(nvmlDevice_t, nvmlMemory_v2_t *) =
        (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_v2_t *))nvml_real_fn(N_MEMINFO_V2);
    if (!real)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t rc = real(device, memory);
    if (rc != NVML_SUCCESS || !memory)
        return rc;
    uint64_t limit, used;
    switch (shim_nvml_view(device, &limit, &used)) {
    case SHIM_FAILED:
        return NVML_ERROR_UNKNOWN;
    case SHIM_LIMITED:
        memory->total = limit;
        memory->reserved = 0;
        memory->used = used;
        memory->free = used >= limit ? 0 : limit - used;
        break;
    default:
        break;
    }
    return rc;
}

/* ---- fork ----------------------------------------------------------------------------- */

/* A child owns none of its parent's device memory (CUDA forbids it from using
 * the parent's context), so it starts from nothing and claims its own slot. */
static void after_fork_child(void)
{
    pt_reset(&g_table);
    memset(g_primary, 0, sizeof g_primary);
    shim_forget_process();
}

/* A clean exit gives the slot back at once; a killed process is swept later. */
__attribute__((destructor)) static void shim_destructor(void)
{
    if (__atomic_load_n(&g_shim.state, __ATOMIC_ACQUIRE) == SHIM_LIMITED)
        ledger_release_slot(&g_shim.ledger);
}

__attribute__((constructor)) static void shim_constructor(void)
{
    /* Nothing that touches the driver: every process of the container loads us. */
    pthread_atfork(NULL, NULL, after_fork_child);
}
