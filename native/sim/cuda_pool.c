/* The simulated CUDA driver (libcuda.so.1). Stream-ordered allocation and
 * memory pools. */
#include "cuda_sim.h"

/* ------------------------------------------------------------------------ */
/* Stream-ordered allocation and memory pools                                */

/* Freed pool memory.  As in the driver, memory freed into a pool stays
 * reserved by it, and charged to its device, until a synchronizing call
 * (stream, event or context synchronize) gives back what exceeds the pool's
 * release threshold (default 0), or cuMemPoolTrimTo, the pool's destruction
 * or its device's reset does.  Allocations from the pool reuse it first.
 * kept_total: every pool's kept bytes, so that a sync with none is cheap. */
static unsigned long long kept_total;

/* Keep at most `keep` bytes of what `p` holds freed.  drv.mu held. */
static void pool_release(struct sim_pool *p, unsigned long long keep)
{
    if (p->kept <= keep)
        return;
    unsigned long long give = p->kept - keep;
    uncharge(p->phys, give);
    p->kept = keep;
    kept_total -= give;
}

void pools_settle_locked(void)
{
    if (!kept_total)
        return;
    for (size_t i = 0; i < drv.objs.cap; i++) {
        struct obj *o = drv.objs.vals[i];
        if (o && o->type == O_POOL)
            pool_release((struct sim_pool *)o, ((struct sim_pool *)o)->threshold);
    }
}

void pools_release_device_locked(int phys)
{
    if (!kept_total)
        return;
    for (size_t i = 0; i < drv.objs.cap; i++) {
        struct obj *o = drv.objs.vals[i];
        if (o && o->type == O_POOL && ((struct sim_pool *)o)->phys == phys)
            pool_release((struct sim_pool *)o, 0);
    }
}

/* drv.mu held. */
static struct sim_pool *default_pool(int phys)
{
    if (!drv.default_pool[phys]) {
        struct sim_pool *p = obj_new(sizeof *p, O_POOL, NULL);
        if (!p)
            return NULL;
        p->phys = phys;
        p->is_default = 1;
        drv.default_pool[phys] = p;
    }
    if (!drv.current_pool[phys])
        drv.current_pool[phys] = drv.default_pool[phys];
    return drv.default_pool[phys];
}

SIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    NEED_INIT();
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    struct sim_pool *p = default_pool(phys);
    UNLOCK();
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool_out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    NEED_INIT();
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    struct sim_pool *p = default_pool(phys) ? drv.current_pool[phys] : NULL;
    UNLOCK();
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    NEED_INIT();
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    struct sim_pool *p = obj_get(pool, O_POOL);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (p && p->phys == phys && default_pool(phys)) {
        drv.current_pool[phys] = p;
        rc = CUDA_SUCCESS;
    }
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    NEED_INIT();
    if (!pool || !poolProps)
        return CUDA_ERROR_INVALID_VALUE;
    if (poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED &&
        poolProps->allocType != CU_MEM_ALLOCATION_TYPE_MANAGED)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult err = CUDA_SUCCESS;
    int phys = location_phys(&poolProps->location, &err);
    if (phys == -2)
        return err;
    LOCK();
    struct sim_pool *p = obj_new(sizeof *p, O_POOL, NULL);
    if (p)
        p->phys = phys;
    UNLOCK();
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    NEED_INIT();
    LOCK();
    struct sim_pool *p = obj_get(pool, O_POOL);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (p && !p->is_default) {
        /* Outstanding allocations stay valid until freed, so the structure
         * is kept; only the handle dies. */
        pool_release(p, 0);
        hm_del(&drv.objs, (uintptr_t)p);
        p->destroyed = 1;
        if (p->phys >= 0 && drv.current_pool[p->phys] == p)
            drv.current_pool[p->phys] = drv.default_pool[p->phys];
        rc = CUDA_SUCCESS;
    }
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    NEED_INIT();
    LOCK();
    struct sim_pool *p = obj_get(pool, O_POOL);
    if (p)
        pool_release(p, minBytesToKeep);
    UNLOCK();
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    NEED_INIT();
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_pool *p = obj_get(pool, O_POOL);
    CUresult rc = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (p) {
        switch (attr) {
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
            p->reuse[attr] = *(int *)value;
            break;
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
            p->threshold = *(cuuint64_t *)value;
            break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
            if (*(cuuint64_t *)value != 0)
                rc = CUDA_ERROR_INVALID_VALUE;
            else
                p->peak = p->used;
            break;
        default:
            rc = CUDA_ERROR_INVALID_VALUE;
        }
    }
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    NEED_INIT();
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_pool *p = obj_get(pool, O_POOL);
    CUresult rc = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (p) {
        switch (attr) {
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
            *(int *)value = p->reuse[attr];
            break;
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = p->threshold; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = p->used + p->kept; break;
        case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = p->used; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = p->peak; break;
        default: rc = CUDA_ERROR_INVALID_VALUE;
        }
    }
    UNLOCK();
    return rc;
}

/* Access from other devices, as cuMemPoolSetAccess left it; a pool's own
 * device always has read-write access. */
SIM_API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    NEED_INIT();
    if (!map && count)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_pool *p = obj_get(pool, O_POOL);
    CUresult rc = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; !rc && i < count; i++) {
        int phys = map[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE
                       ? dev_phys(map[i].location.id) : -1;
        CUmemAccess_flags f = map[i].flags;
        if (phys < 0 || (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
                         f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
            rc = CUDA_ERROR_INVALID_VALUE;
        else if (phys == p->phys && f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            rc = CUDA_ERROR_INVALID_DEVICE;
    }
    for (size_t i = 0; !rc && i < count; i++) {
        int phys = dev_phys(map[i].location.id);
        if (phys != p->phys)
            p->access[phys] = map[i].flags;
    }
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool,
                                    CUmemLocation *location)
{
    NEED_INIT();
    if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = dev_phys(location->id);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    struct sim_pool *p = obj_get(memPool, O_POOL);
    if (p)
        *flags = phys == p->phys ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : p->access[phys];
    UNLOCK();
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Stream-ordered allocations take effect at once.  pool == NULL: the
 * current pool of the stream's device. */
static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, int from_pool,
                            CUstream hStream)
{
    NEED_INIT();
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_ctx *c = NULL;
    CUresult rc = stream_ctx(hStream, &c);
    if (rc)
        goto out;
    void *graph = stream_capture(hStream);
    if (graph && from_pool) { /* captured: only the device's graph memory */
        rc = CUDA_ERROR_NOT_SUPPORTED;
        goto out;
    }
    if (graph) { /* captured: an allocation node of the graph, memory at its launch */
        rc = bytesize ? capture_alloc(graph, c->phys, bytesize, dptr) : CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    struct sim_pool *p;
    if (from_pool) {
        p = obj_get(pool, O_POOL);
        if (!p) {
            rc = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
    } else {
        p = default_pool(c->phys) ? drv.current_pool[c->phys] : NULL;
        if (!p) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
    }
    /* What the pool keeps serves first; if the device cannot give the rest,
     * the pool gives back all it keeps and the allocation tries again. */
    unsigned long long need = round_up(bytesize, drv.cfg.granularity);
    if (p->phys >= 0 && bytesize)
        pool_release(p, p->kept > need ? p->kept - need : 0);
    rc = mem_alloc_locked(c, p->phys, bytesize, 0, 0, p, dptr);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY && p->kept) {
        pool_release(p, 0);
        rc = mem_alloc_locked(c, p->phys, bytesize, 0, 0, p, dptr);
    }
out:
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{ return alloc_async(dptr, bytesize, NULL, 0, hStream); }
SIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{ return alloc_async(dptr, bytesize, NULL, 0, hStream); }
SIM_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream hStream)
{ return alloc_async(dptr, bytesize, pool, 1, hStream); }
SIM_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream)
{ return alloc_async(dptr, bytesize, pool, 1, hStream); }

static CUresult free_async(CUdeviceptr dptr, CUstream hStream)
{
    NEED_INIT();
    LOCK();
    struct sim_ctx *c;
    CUresult rc = stream_ctx(hStream, &c);
    void *graph = rc ? NULL : stream_capture(hStream);
    if (graph) {
        rc = capture_free(graph, dptr);
    } else if (!rc) {
        struct region *r = live_exact(dptr);
        if (!r && graph_mem_address(dptr)) {
            /* a graph allocation freed outside its graph: nothing to give back here */
        } else if (!r || r->kind != R_ALLOC || r->ipc) {
            rc = CUDA_ERROR_INVALID_VALUE;
        } else {
            struct sim_pool *p = r->pool;
            if (p && !p->destroyed && p->phys >= 0) { /* the pool keeps the charge */
                p->kept += r->charge;
                kept_total += r->charge;
                r->charge = 0;
            }
            region_free(r);
        }
    }
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) { return free_async(dptr, hStream); }
SIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) { return free_async(dptr, hStream); }
