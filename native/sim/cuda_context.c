/* The simulated CUDA driver (libcuda.so.1).  Contexts: creation and
 * teardown, primary contexts, and the calls that push, pop and set the
 * per-thread context stack (which lives in cuda_current.c). */
#include "cuda_sim.h"

#include "cgpu_sizes.h"

#include <stdlib.h>

static void ctx_defaults(struct sim_ctx *c)
{
    c->limits[CU_LIMIT_STACK_SIZE] = CGPU_STACK_DEFAULT;
    c->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = CGPU_PRINTF_FIFO_DEFAULT;
    c->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = CGPU_MALLOC_HEAP_DEFAULT;
    c->limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
    c->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
    c->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
    c->limits[CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = 0;
    c->limits[CU_LIMIT_SHMEM_SIZE] = 232448;
}

static struct sim_ctx *ctx_new(int phys, unsigned flags, int primary)
{
    struct sim_ctx *c = obj_new(sizeof *c, O_CTX, NULL);
    if (!c)
        return NULL;
    c->phys = phys;
    c->flags = flags;
    c->primary = primary;
    c->id = ++drv.next_id;
    ctx_defaults(c);
    return c; /* never freed: stale handles must stay recognisable */
}

/* The first context of a device in this process takes CGPU_SIM_CTX_OVERHEAD. */
static CUresult ctx_activate(struct sim_ctx *c)
{
    int phys = c->phys;
    if (drv.ctx_count[phys] == 0) {
        CUresult rc = charge(phys, drv.cfg.ctx_overhead);
        if (rc)
            return rc;
    }
    if (ctx_queues_init(c)) {
        if (drv.ctx_count[phys] == 0)
            uncharge(phys, drv.cfg.ctx_overhead);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    drv.ctx_count[phys]++;
    state_publish(phys);
    atomic_store(&c->alive, 1);
    return CUDA_SUCCESS;
}

/* Run the destructors of a destroyed context's local-storage entries (the
 * runtime's, set through cuda_export.c's table) and free them; no lock held. */
void cls_run_dtors(struct sim_ctx *c, struct sim_cls *list)
{
    while (list) {
        struct sim_cls *e = list;
        list = e->next;
        if (e->dtor)
            ((cls_dtor)e->dtor)((CUcontext)c, e->key, e->value);
        free(e);
    }
}

/* Destroying a context frees everything allocated in it, as the driver does.
 * Its local-storage entries come back detached: the caller runs their
 * destructors with cls_run_dtors once it has dropped the lock. */
static struct sim_cls *ctx_teardown(struct sim_ctx *c)
{
    for (size_t i = drv.nlive; i-- > 0;) {
        struct region *r = drv.live[i];
        if (r->kind == R_ALLOC && r->ctx == c)
            region_free(r);
    }
    pools_release_device_locked(c->phys);
    size_t n = 0;
    void **doomed = malloc((drv.objs.n + 1) * sizeof *doomed);
    for (size_t i = 0; doomed && i < drv.objs.cap; i++) {
        struct obj *o = drv.objs.vals[i];
        if (o && o->ctx == c && o->type != O_CTX)
            doomed[n++] = o;
    }
    for (size_t i = 0; i < n; i++) {
        struct obj *o = doomed[i];
        if (o->type == O_ARRAY || o->type == O_MIPMAP)
            array_free_locked((struct sim_array *)o);
        else
            obj_free(o);
    }
    free(doomed);
    atomic_store(&c->alive, 0);
    int phys = c->phys;
    uncharge(phys, c->heap_charge);
    c->heap_charge = 0;
    ctx_defaults(c); /* a primary context made again starts from the defaults */
    if (--drv.ctx_count[phys] == 0)
        uncharge(phys, drv.cfg.ctx_overhead);
    state_publish(phys);
    struct sim_cls *cls = c->cls;
    c->cls = NULL;
    return cls;
}

/* ------------------------------------------------------------------------ */
/* Primary contexts                                                          */

#define CTX_FLAGS_VALID 0xffu

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    NEED_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    struct sim_ctx *c = drv.primary[phys];
    if (!c) {
        c = drv.primary[phys] = ctx_new(phys, drv.primary_flags[phys], 1);
        if (!c) {
            UNLOCK();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (c->refcount == 0) {
        c->flags = drv.primary_flags[phys];
        CUresult rc = ctx_activate(c);
        if (rc) {
            UNLOCK();
            return rc;
        }
    }
    c->refcount++;
    *pctx = (CUcontext)c;
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    NEED_INIT();
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    struct sim_ctx *c = drv.primary[phys];
    if (!c || c->refcount == 0) {
        UNLOCK();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    struct sim_cls *cls = NULL;
    if (--c->refcount == 0)
        cls = ctx_teardown(c);
    UNLOCK();
    cls_run_dtors(c, cls);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}

SIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    NEED_INIT();
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    struct sim_ctx *c = drv.primary[phys];
    struct sim_cls *cls = NULL;
    if (c && c->refcount > 0) {
        c->refcount = 0;
        cls = ctx_teardown(c);
    }
    drv.primary_flags[phys] = 0;
    UNLOCK();
    cls_run_dtors(c, cls);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    NEED_INIT();
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    *flags = drv.primary_flags[phys];
    *active = drv.primary[phys] && drv.primary[phys]->refcount > 0;
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    NEED_INIT();
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (flags & ~CTX_FLAGS_VALID)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    drv.primary_flags[phys] = flags;
    if (drv.primary[phys])
        drv.primary[phys]->flags = flags;
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    NEED_INIT();
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (drv.primary[phys] && drv.primary[phys]->refcount > 0)
        return CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE;
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

/* The handle cuDevicePrimaryCtxRetain will return, without retaining it: the
 * runtime asks for it through its private table before it retains. */
CUresult primary_ctx_handle(CUdevice dev, CUcontext *out)
{
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    struct sim_ctx *c = drv.primary[phys];
    if (!c)
        c = drv.primary[phys] = ctx_new(phys, drv.primary_flags[phys], 1);
    UNLOCK();
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUcontext)c;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Context stack                                                             */

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    NEED_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~CTX_FLAGS_VALID)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    tls_top();
    if (tls_depth >= CTX_STACK_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_ctx *c = ctx_new(phys, flags, 0);
    if (!c) {
        UNLOCK();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->refcount = 1;
    CUresult rc = ctx_activate(c);
    UNLOCK();
    if (rc)
        return rc;
    tls_stack[tls_depth++] = c;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

SIM_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

SIM_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                unsigned int flags, CUdevice dev)
{
    if (numParams < 0 || (numParams > 0 && !paramsArray))
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return ctx_create(pctx, flags, dev);
}

SIM_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                unsigned int flags, CUdevice dev)
{
    if (ctxCreateParams && ctxCreateParams->numExecAffinityParams < 0)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return ctx_create(pctx, flags, dev);
}

/* A context handle this process created (alive or not). */
static struct sim_ctx *ctx_lookup(CUcontext ctx)
{
    return obj_get(ctx, O_CTX);
}

SIM_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    NEED_INIT();
    LOCK();
    struct sim_ctx *c = ctx_lookup(ctx);
    if (!c || c->primary || !atomic_load(&c->alive)) {
        UNLOCK();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    struct sim_cls *cls = ctx_teardown(c);
    UNLOCK();
    if (tls_top() == c)
        tls_depth--;
    cls_run_dtors(c, cls);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

/* Legacy usage counts: cuCtxCreate starts a context at 1, cuCtxAttach adds
 * one to the current context, cuCtxDetach (of the current context) takes one
 * and destroys the context at 0.  Primary contexts are counted by
 * cuDevicePrimaryCtxRetain/Release instead. */
SIM_API CUresult cuCtxAttach(CUcontext *pctx, unsigned int flags)
{
    NEED_INIT();
    if (!pctx || flags)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (c->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    LOCK();
    c->refcount++;
    UNLOCK();
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxDetach(CUcontext ctx)
{
    NEED_INIT();
    struct sim_ctx *c = tls_top();
    if (!ctx || (CUcontext)c != ctx || c->primary || !atomic_load(&c->alive))
        return CUDA_ERROR_INVALID_CONTEXT;
    LOCK();
    int gone = --c->refcount == 0;
    struct sim_cls *cls = gone ? ctx_teardown(c) : NULL;
    UNLOCK();
    if (gone)
        tls_depth--;
    cls_run_dtors(c, cls);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    NEED_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)tls_top();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    NEED_INIT();
    struct sim_ctx *top = tls_top();
    if (!ctx) {
        if (top)
            tls_depth--;
        return CUDA_SUCCESS;
    }
    LOCK();
    struct sim_ctx *c = ctx_lookup(ctx);
    /* A primary context's handle stays valid while it is inactive. */
    int ok = c && (c->primary || atomic_load(&c->alive));
    UNLOCK();
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_depth)
        tls_stack[tls_depth - 1] = c;
    else
        tls_stack[tls_depth++] = c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    NEED_INIT();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    tls_top();
    if (tls_depth >= CTX_STACK_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_ctx *c = ctx_lookup(ctx);
    /* A primary context's handle stays valid while it is inactive. */
    int ok = c && (c->primary || atomic_load(&c->alive));
    UNLOCK();
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    tls_stack[tls_depth++] = c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPushCurrent(CUcontext ctx)
{
    return cuCtxPushCurrent_v2(ctx);
}

SIM_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    NEED_INIT();
    struct sim_ctx *top = tls_top();
    if (!top)
        return CUDA_ERROR_INVALID_CONTEXT;
    tls_depth--;
    if (pctx)
        *pctx = (CUcontext)top;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    return cuCtxPopCurrent_v2(pctx);
}

CUresult ctx_lookup_alive(CUcontext ctx, struct sim_ctx **out)
{
    NEED_INIT();
    LOCK();
    struct sim_ctx *c = ctx_lookup(ctx);
    int alive = c && atomic_load(&c->alive);
    UNLOCK();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!alive)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = c;
    return CUDA_SUCCESS;
}

/* ctx == NULL means the current context. */
static CUresult ctx_or_current(CUcontext ctx, struct sim_ctx **out)
{
    if (!ctx)
        return cur_ctx(out);
    NEED_INIT();
    LOCK();
    struct sim_ctx *c = ctx_lookup(ctx);
    UNLOCK();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!atomic_load(&c->alive))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    struct sim_ctx *c;
    CUresult rc = ctx_or_current(ctx, &c);
    if (rc)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = drv.ord[c->phys];
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetDevice(CUdevice *device)
{
    return cuCtxGetDevice_v2(device, NULL);
}

SIM_API CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    struct sim_ctx *c;
    CUresult rc = ctx_or_current(ctx, &c);
    if (rc)
        return rc;
    LOCK();
    unsigned long long end = c->last_end;
    int phys = c->phys;
    UNLOCK();
    wait_mark(phys, end);
    LOCK();
    pools_settle_locked();
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSynchronize(void)
{
    return cuCtxSynchronize_v2(NULL);
}

SIM_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    struct sim_ctx *c;
    CUresult rc = ctx_or_current(ctx, &c);
    if (rc)
        return rc;
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = 3020;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetFlags(unsigned int *flags)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    struct sim_ctx *c;
    CUresult rc = ctx_or_current(ctx, &c);
    if (rc)
        return rc;
    if (!ctxId)
        return CUDA_ERROR_INVALID_VALUE;
    *ctxId = c->id;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (leastPriority)
        *leastPriority = 0;
    if (greatestPriority)
        *greatestPriority = -5;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!pvalue)
        return CUDA_ERROR_INVALID_VALUE;
    if ((int)limit < 0 || limit >= CU_LIMIT_MAX)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    *pvalue = c->limits[limit];
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if ((int)limit < 0 || limit >= CU_LIMIT_MAX || limit == CU_LIMIT_SHMEM_SIZE ||
        limit == CU_LIMIT_CIG_ENABLED)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    if (limit == CU_LIMIT_STACK_SIZE && value > SIM_STACK_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    /* The heaps are device memory: the new size is reserved now, or the call fails
     * with CUDA_ERROR_OUT_OF_MEMORY and the old size stays. */
    LOCK();
    size_t old = c->limits[limit];
    c->limits[limit] = value;
    unsigned long long want = heaps_beyond_defaults(c->limits);
    if (want > c->heap_charge) {
        rc = charge(c->phys, want - c->heap_charge);
        if (rc)
            c->limits[limit] = old;
        else
            c->heap_charge = want;
    } else if (want < c->heap_charge) {
        uncharge(c->phys, c->heap_charge - want);
        c->heap_charge = want;
    }
    UNLOCK();
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Per-context cache and shared-memory preferences, per-thread capture mode  */

SIM_API CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!pconfig)
        return CUDA_ERROR_INVALID_VALUE;
    *pconfig = (CUfunc_cache)c->cache_config;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    c->cache_config = (int)config;
    return CUDA_SUCCESS;
}

/* Bank size is fixed at four bytes on the devices since Volta: reads say so,
 * and setting it is accepted and has no effect, as the driver documents. */
SIM_API CUresult cuCtxGetSharedMemConfig(CUsharedconfig *pConfig)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!pConfig)
        return CUDA_ERROR_INVALID_VALUE;
    *pConfig = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetSharedMemConfig(CUsharedconfig config)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if ((unsigned)config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* No stream is ever capturing here, but the mode is the thread's to swap. */
static _Thread_local CUstreamCaptureMode tls_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

SIM_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    NEED_INIT();
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = tls_capture_mode;
    tls_capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}
