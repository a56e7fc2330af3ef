/* Contexts: the overhead a device's first context costs, and the memory that
 * dies with a context (destroy, detach, primary reset and release). */
#include "charge.h"

/* ---- contexts: their overhead, and the memory that dies with them ------------- */


/* A device's context overhead is charged while it has at least one live context of
 * this process: on the first context's creation, and given back with the last. */
static int context_opening(int dev)
{
    return dev >= 0 && __atomic_load_n(&g_shim.contexts[dev], __ATOMIC_ACQUIRE) == 0;
}

/* After the driver made a new context `ctx` on `ordinal`: remember its device, and
 * charge the device's context overhead if it is the first.  The overhead is memory
 * the process holds on the GPU like any other: where it does not fit in the slice,
 * the context is refused as a full GPU refuses it (CUDA_ERROR_OUT_OF_MEMORY), and the
 * caller undoes it (`undo`). */
static CUresult context_created(CUdevice ordinal, CUcontext ctx)
{
    int dev = device_of_ordinal(ordinal);
    if (dev < 0 || !ctx)
        return CUDA_SUCCESS;
    track(PT_KIND_CTXDEV ^ (uint64_t)(uintptr_t)ctx, dev, 0, NULL);
    if (__atomic_fetch_add(&g_shim.contexts[dev], 1, __ATOMIC_ACQ_REL) != 0)
        return CUDA_SUCCESS;
    uint64_t overhead = shim_context_overhead(dev);
    if (!overhead)
        return CUDA_SUCCESS;
    if (reserve(dev, overhead) == CUDA_SUCCESS) {
        track(PT_KIND_CONTEXT ^ (uint64_t)dev, dev, overhead, NULL);
        return CUDA_SUCCESS;
    }
    struct untracked gone;
    (void)untrack(PT_KIND_CTXDEV ^ (uint64_t)(uintptr_t)ctx, &gone);
    __atomic_fetch_sub(&g_shim.contexts[dev], 1, __ATOMIC_ACQ_REL);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

/* The driver destroyed `ctx`: credit the memory allocated in it, and the device's
 * context overhead if it was the last. */
static void context_destroyed(void *ctx)
{
    if (!ctx || mode() != SHIM_LIMITED)
        return;
    uint64_t bytes;
    unsigned dev;
    ledger_lock(&g_shim.ledger);
    if (pt_remove(&g_table, PT_KIND_CTXDEV ^ (uint64_t)(uintptr_t)ctx, &dev, &bytes, NULL) &&
        __atomic_fetch_sub(&g_shim.contexts[dev], 1, __ATOMIC_ACQ_REL) == 1) {
        uint64_t key = PT_KIND_CONTEXT ^ (uint64_t)dev;
        if (pt_remove(&g_table, key, &dev, &bytes, NULL))
            credit_locked(key, dev, bytes);
    }
    pt_remove_context(&g_table, ctx, credit_locked);
    ledger_unlock(&g_shim.ledger);
}

/* Whether the primary context of `ordinal` is not yet known to be alive. */
static int primary_unknown(CUdevice ordinal)
{
    return ordinal >= 0 && ordinal < SHIM_MAX_ORDINALS && !__atomic_load_n(&g_shim.primary[ordinal], __ATOMIC_ACQUIRE);
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    int limited = mode() == SHIM_LIMITED, fresh = limited && primary_unknown(dev);
    if (fresh && context_opening(device_of_ordinal(dev)))
        shim_context_overhead_before(device_of_ordinal(dev));
    CUresult rc = REAL(cuDevicePrimaryCtxRetain)(pctx, dev);
    /* Retains are counted by the driver: only the first makes a context. */
    if (rc == CUDA_SUCCESS && fresh && pctx &&
        __atomic_exchange_n(&g_shim.primary[dev], *pctx, __ATOMIC_ACQ_REL) == NULL &&
        context_created(dev, *pctx) != CUDA_SUCCESS) {
        /* Its overhead does not fit: give the retain back, which destroys the context. */
        __atomic_store_n(&g_shim.primary[dev], NULL, __ATOMIC_RELEASE);
        (void)REAL(cuDevicePrimaryCtxRelease_v2)(dev);
        *pctx = NULL;
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
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
    if (rc == CUDA_SUCCESS && pctx && mode() == SHIM_LIMITED &&
        context_created(ordinal, *pctx) != CUDA_SUCCESS) {
        /* Its overhead does not fit: the context goes, as on a full GPU. */
        (void)REAL(cuCtxDestroy_v2)(*pctx);
        *pctx = NULL;
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
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

/* Legacy usage counts: cuCtxAttach adds one to the current context's count,
 * cuCtxDetach takes one off and destroys the context at zero.  The count beyond
 * the creator's lives in the context's table entry (aux). */
EXPORT CUresult cuCtxAttach(CUcontext *pctx, unsigned int flags)
{
    CUresult rc = REAL(cuCtxAttach)(pctx, flags);
    if (rc != CUDA_SUCCESS || !pctx || !*pctx || mode() != SHIM_LIMITED)
        return rc;
    ledger_lock(&g_shim.ledger);
    struct pt_entry *e = pt_find(&g_table, PT_KIND_CTXDEV ^ (uint64_t)(uintptr_t)*pctx);
    if (e)
        e->aux++;
    ledger_unlock(&g_shim.ledger);
    return rc;
}

EXPORT CUresult cuCtxDetach(CUcontext ctx)
{
    int last = 1;
    if (ctx && mode() == SHIM_LIMITED) {
        ledger_lock(&g_shim.ledger);
        struct pt_entry *e = pt_find(&g_table, PT_KIND_CTXDEV ^ (uint64_t)(uintptr_t)ctx);
        if (e && e->aux) {
            e->aux--;
            last = 0;
        }
        ledger_unlock(&g_shim.ledger);
    }
    CUresult rc = REAL(cuCtxDetach)(ctx);
    if (rc == CUDA_SUCCESS && last)
        context_destroyed(ctx);
    else if (rc != CUDA_SUCCESS && !last) { /* refused: the count stands */
        ledger_lock(&g_shim.ledger);
        struct pt_entry *e = pt_find(&g_table, PT_KIND_CTXDEV ^ (uint64_t)(uintptr_t)ctx);
        if (e)
            e->aux++;
        ledger_unlock(&g_shim.ledger);
    }
    return rc;
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
    context_destroyed(__atomic_exchange_n(&g_shim.primary[ordinal], NULL, __ATOMIC_RELAXED));
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

