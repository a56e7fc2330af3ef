/* Contexts: the overhead a device's first context costs, and the memory that
 * dies with a context (destroy, detach, primary reset and release). */
#include "charge.h"
#include "compute.h"

#include <pthread.h>
#include <stdlib.h>

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
    /* A GPU where launches take turns: connect to the arbiter now, not at the first launch.  A
     * process that holds a context and launches nothing is then one of its container's, idle;
     * unconnected it was a process outside the containers, and the arbiter left the GPU free
     * about once a second to see its demand (two best-effort containers beside it: 94% busy). */
    if (g_shim.ledger.turns[dev])
        compute_start();
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

/* The hot allocation path records no context (PT_CTX_UNKNOWN): asking cuCtxGetCurrent there
 * was some 40% of what the shim added to PyTorch's uncached alloc+free pair.  A context's memory
 * matters only when the context dies, and until the call that destroys it the driver knows
 * which context each address belongs to.  So before each call that may destroy a context,
 * every entry not learned yet is asked (cuPointerGetAttribute), under the lock that guards
 * the table: an entry once learnt is not asked again, and none is asked in a process whose
 * contexts live as long as it does.  A query the driver cannot answer leaves the entry
 * unknown: what dies with its context then stays charged (over-counted, never under). */
typedef CUresult (*pointer_attr_fn)(void *, CUpointer_attribute, CUdeviceptr);
static pointer_attr_fn pointer_attr; /* set and used under the table's lock (doom) */

static void *owner_of(uint64_t key)
{
    CUcontext ctx = NULL;
    if (pointer_attr(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)(key ^ PT_KIND_PTR)) != CUDA_SUCCESS)
        return NULL;
    return ctx;
}

/* The linear memory of a context about to die, taken out of the table before the driver call
 * that may destroy it, and credited after (bury).  Until the driver frees it, no other thread
 * can be given one of its addresses; once the call returns, one can, and its own entry must
 * be the only one of that address: left in the table until after the call, the dying
 * context's older entry was what that thread's free took out (pt_remove_fast takes the
 * oldest), and its own then outlived it, charged until the process ended. */
struct doomed {
    struct pt_entry *e;
    size_t n;
};

static struct doomed doom(void *ctx)
{
    struct doomed d = {NULL, 0};
    /* Without a slot (none charged yet, or given back at exit) there is nothing to credit. */
    if (!ctx || mode() != SHIM_LIMITED || __atomic_load_n(&g_shim.ledger.slot, __ATOMIC_RELAXED) < 0)
        return d;
    ledger_lock_private(&g_shim.ledger);
    if ((pointer_attr = (pointer_attr_fn)shim_driver_sym("cuPointerGetAttribute")))
        pt_learn_contexts(&g_table, owner_of);
    d.n = pt_take_linear(&g_table, ctx, &d.e);
    ledger_unlock_private(&g_shim.ledger);
    return d;
}

/* After the call: credit what died with the context, or put it back if it lives on. */
static void bury(struct doomed *d, int died)
{
    if (d->n && died) {
        ledger_lock(&g_shim.ledger);
        for (size_t i = 0; i < d->n; i++)
            credit_locked(d->e[i].key, pt_entry_dev(&d->e[i]), pt_entry_bytes(&d->e[i]));
        ledger_unlock(&g_shim.ledger);
    } else if (d->n) {
        ledger_lock_private(&g_shim.ledger);
        for (size_t i = 0; i < d->n; i++)
            (void)pt_insert(&g_table, d->e[i].key, pt_entry_dev(&d->e[i]), pt_entry_bytes(&d->e[i]),
                            d->e[i].ctx);
        ledger_unlock_private(&g_shim.ledger);
    }
    free(d->e);
    d->e = NULL;
    d->n = 0;
}

/* The driver destroyed `ctx`: credit the memory allocated in it, and the device's
 * context overhead if it was the last.  Its linear memory was taken out before the call
 * (doom) and is credited by bury. */
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
static CUresult destroyed_if(CUresult rc, CUcontext ctx, struct doomed *d)
{
    bury(d, rc == CUDA_SUCCESS);
    if (rc == CUDA_SUCCESS)
        context_destroyed(ctx);
    return rc;
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    struct doomed d = doom(ctx);
    return destroyed_if(REAL(cuCtxDestroy_v2)(ctx), ctx, &d);
}

EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
    struct doomed d = doom(ctx);
    return destroyed_if(REAL(cuCtxDestroy)(ctx), ctx, &d);
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
    struct doomed d = last ? doom(ctx) : (struct doomed){NULL, 0};
    CUresult rc = REAL(cuCtxDetach)(ctx);
    bury(&d, rc == CUDA_SUCCESS && last);
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

/* The primary context of `ordinal` as this process knows it, or NULL. */
static void *primary_of(CUdevice ordinal)
{
    if (ordinal < 0 || ordinal >= SHIM_MAX_ORDINALS)
        return NULL;
    return __atomic_load_n(&g_shim.primary[ordinal], __ATOMIC_RELAXED);
}

/* After a reset or release of `ordinal`'s primary context: if it is gone, credit
 * what died with it. */
static CUresult primary_gone_if(CUresult rc, CUdevice ordinal, int released, struct doomed *d)
{
    int died = rc == CUDA_SUCCESS && ordinal >= 0 && ordinal < SHIM_MAX_ORDINALS &&
               !(released && primary_active(ordinal)); /* other retains keep it alive */
    bury(d, died);
    if (died)
        context_destroyed(__atomic_exchange_n(&g_shim.primary[ordinal], NULL, __ATOMIC_RELAXED));
    return rc;
}

EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    struct doomed d = doom(primary_of(dev));
    return primary_gone_if(REAL(cuDevicePrimaryCtxReset_v2)(dev), dev, 0, &d);
}

EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    struct doomed d = doom(primary_of(dev));
    return primary_gone_if(REAL(cuDevicePrimaryCtxReset)(dev), dev, 0, &d);
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    struct doomed d = doom(primary_of(dev));
    return primary_gone_if(REAL(cuDevicePrimaryCtxRelease_v2)(dev), dev, 1, &d);
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    struct doomed d = doom(primary_of(dev));
    return primary_gone_if(REAL(cuDevicePrimaryCtxRelease)(dev), dev, 1, &d);
}


/* ---- the per-context heaps (cuCtxSetLimit) --------------------------------------- */

/* The stack, the malloc heap and the printf FIFO are device memory the driver reserves
 * when the limit is set: the stack for every thread the device can hold at once (its
 * per-thread size, rounded to 16 bytes, times the resident threads of an SM times the
 * SMs: 1 KiB is 264 MiB on an H100), the heap and the FIFO their size, each in whole
 * 2 MiB pages.  Their defaults are part of the context overhead; what a limit takes
 * beyond its default is charged before the driver call (a size that does not fit is
 * refused with CUDA_ERROR_OUT_OF_MEMORY, as the driver refuses one that does not fit
 * the GPU), kept per context and limit, and given back when the limit is lowered or
 * the context dies. */
EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    if ((limit != CU_LIMIT_STACK_SIZE && limit != CU_LIMIT_MALLOC_HEAP_SIZE && limit != CU_LIMIT_PRINTF_FIFO_SIZE) ||
        mode() != SHIM_LIMITED)
        return REAL(cuCtxSetLimit)(limit, value);
    void *ctx = current_context();
    int ordinal = -1;
    if (!ctx || !g_shim.ctx_get_device || g_shim.ctx_get_device(&ordinal) != 0 || device_of_ordinal(ordinal) < 0)
        return REAL(cuCtxSetLimit)(limit, value);
    int dev = device_of_ordinal(ordinal);
    uint64_t key = PT_KIND_HEAP ^ ((uint64_t)(uintptr_t)ctx + (uint64_t)limit);
    pthread_mutex_lock(&g_heaps_lock); /* one bookkeeper of a context's heaps at a time */
    uint64_t want = heap_beyond_default(limit, value, ordinal);
    struct untracked had = {.charge = 0};
    int known = untrack(key, &had);
    uint64_t held = known ? had.charge : 0;
    if (want > held && reserve(dev, want - held) != CUDA_SUCCESS) {
        if (known)
            track(key, dev, held, ctx);
        pthread_mutex_unlock(&g_heaps_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult rc = REAL(cuCtxSetLimit)(limit, value);
    if (rc != CUDA_SUCCESS) { /* the old size stays */
        if (want > held)
            unreserve(dev, want - held);
        if (known)
            track(key, dev, held, ctx);
        pthread_mutex_unlock(&g_heaps_lock);
        return rc;
    }
    if (want < held)
        unreserve(dev, held - want);
    if (want)
        track(key, dev, want, ctx);
    pthread_mutex_unlock(&g_heaps_lock);
    return rc;
}

