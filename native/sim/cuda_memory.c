/* The simulated CUDA driver (libcuda.so.1). Device memory: allocation, free,
 * info, host memory, copies and sets, pointer attributes. */
#include "cuda_sim.h"

/* ------------------------------------------------------------------------ */
/* Device memory                                                             */

/* Allocate `bytes` on physical device `phys` (-1: host memory that still gets
 * a device address, e.g. a host-located pool).  drv.mu held. */
CUresult mem_alloc_locked(struct sim_ctx *ctx, int phys, unsigned long long bytes,
                                 int low, int managed, struct sim_pool *pool,
                                 CUdeviceptr *out)
{
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long gran = drv.cfg.granularity;
    unsigned long long align = gran > 512 ? gran : 512;
    if (bytes > (1ULL << 48))
        return CUDA_ERROR_OUT_OF_MEMORY;
    unsigned long long chg = phys >= 0 ? round_up(bytes, gran) : 0;
    unsigned long long foot = round_up(bytes, align);
    struct region *r = calloc(1, sizeof *r);
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = charge(phys, chg);
    if (rc) {
        free(r);
        return rc;
    }
    unsigned long long addr;
    struct zone *z = &drv.zone[low ? 0 : 1];
    if (zone_take(z, foot, align, 0, &addr)) {
        uncharge(phys, chg);
        free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->base = addr;
    r->size = foot;
    r->req = bytes;
    r->charge = chg;
    r->kind = R_ALLOC;
    r->phys = phys;
    r->managed = managed;
    r->ctx = ctx;
    r->pool = pool;
    r->id = ++drv.next_id;
    if (live_insert(r)) {
        zone_give(z, addr, foot);
        uncharge(phys, chg);
        free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (pool) {
        pool->used += foot;
        if (pool->used > pool->peak)
            pool->peak = pool->used;
    }
    *out = addr;
    return CUDA_SUCCESS;
}

static CUresult mem_alloc(unsigned long long bytes, int low, int managed, CUdeviceptr *out)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    rc = mem_alloc_locked(c, c->phys, bytes, low, managed, NULL, out);
    UNLOCK();
    return rc;
}

void region_free(struct region *r)
{
    uncharge(r->phys, r->charge);
    if (r->pool && r->pool->used >= r->size)
        r->pool->used -= r->size;
    live_remove(r);
    zone_give(zone_of(r->base), r->base, r->size);
    free(r->maps);
    free(r);
}

static CUresult mem_free(CUdeviceptr dptr)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!dptr)
        return CUDA_SUCCESS;
    LOCK();
    struct region *r = live_exact(dptr);
    if (!r || r->kind != R_ALLOC || r->ipc) {
        UNLOCK();
        return CUDA_ERROR_INVALID_VALUE;
    }
    region_free(r);
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return mem_alloc(bytesize, 0, 0, dptr);
}

SIM_API CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    CUdeviceptr p = 0;
    if (!dptr)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = mem_alloc(bytesize, 1, 0, &p);
    if (!rc)
        *dptr = (CUdeviceptr_v1)p;
    return rc;
}

static CUresult alloc_pitch(CUdeviceptr *dptr, size_t *pPitch, size_t width, size_t height,
                            unsigned int elem, int low)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!dptr || !pPitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long pitch = round_up(width, 512);
    if (pitch < width || height > (1ULL << 48) / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    LOCK();
    rc = mem_alloc_locked(c, c->phys, pitch * height, low, 0, NULL, dptr);
    UNLOCK();
    if (!rc)
        *pPitch = pitch;
    return rc;
}

SIM_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes)
{
    return alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes, 0);
}

SIM_API CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                 unsigned int WidthInBytes, unsigned int Height,
                                 unsigned int ElementSizeBytes)
{
    CUdeviceptr p = 0;
    size_t pitch = 0;
    if (!dptr || !pPitch)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = alloc_pitch(&p, &pitch, WidthInBytes, Height, ElementSizeBytes, 1);
    if (!rc) {
        *dptr = (CUdeviceptr_v1)p;
        *pPitch = (unsigned int)pitch;
    }
    return rc;
}

SIM_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (INITED() && flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    return mem_alloc(bytesize, 0, 1, dptr);
}

SIM_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    return mem_free(dptr);
}

SIM_API CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    return mem_free(dptr);
}

static CUresult get_info(unsigned long long *freep, unsigned long long *totalp)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    LOCK();
    if (drv.st)
        sim_state_lock(drv.st);
    *freep = device_free(c->phys);
    *totalp = drv.cfg.memory[c->phys];
    if (drv.st)
        sim_state_unlock(drv.st);
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    unsigned long long f, t;
    CUresult rc = get_info(&f, &t);
    if (rc)
        return rc;
    if (!free || !total)
        return CUDA_ERROR_INVALID_VALUE;
    *free = f;
    *total = t;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    unsigned long long f, t;
    CUresult rc = get_info(&f, &t);
    if (rc)
        return rc;
    if (!free || !total)
        return CUDA_ERROR_INVALID_VALUE;
    *free = sat32(f);
    *total = sat32(t);
    return CUDA_SUCCESS;
}

static CUresult addr_range(unsigned long long *pbase, unsigned long long *psize,
                           unsigned long long dptr)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    LOCK();
    struct region *r = live_containing(dptr);
    rc = CUDA_ERROR_NOT_FOUND;
    if (r && r->kind == R_ALLOC) {
        *pbase = r->base;
        *psize = r->req;
        rc = CUDA_SUCCESS;
    } else if (r) {
        struct mapping *m = mapping_containing(r, dptr);
        if (m) {
            *pbase = m->va;
            *psize = m->size;
            rc = CUDA_SUCCESS;
        }
    }
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    unsigned long long b, s;
    CUresult rc = addr_range(&b, &s, dptr);
    if (rc)
        return rc;
    if (pbase)
        *pbase = b;
    if (psize)
        *psize = s;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAddressRange(CUdeviceptr_v1 *pbase, unsigned int *psize,
                                      CUdeviceptr_v1 dptr)
{
    unsigned long long b, s;
    CUresult rc = addr_range(&b, &s, dptr);
    if (rc)
        return rc;
    if (pbase)
        *pbase = (CUdeviceptr_v1)b;
    if (psize)
        *psize = sat32(s);
    return CUDA_SUCCESS;
}

/* ---- Host memory: real memory, never charged to a device ---- */

static CUresult host_alloc(void **pp, size_t bytesize)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!pp || !bytesize)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytesize))
        return CUDA_ERROR_OUT_OF_MEMORY;
    LOCK();
    int err = hm_put(&drv.host, (uintptr_t)p, (void *)(uintptr_t)bytesize);
    UNLOCK();
    if (err) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return host_alloc(pp, bytesize);
}

SIM_API CUresult cuMemAllocHost(void **pp, unsigned int bytesize)
{
    return host_alloc(pp, bytesize);
}

SIM_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    if (INITED() && (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                                         CU_MEMHOSTALLOC_WRITECOMBINED)))
        return CUDA_ERROR_INVALID_VALUE;
    return host_alloc(pp, bytesize);
}

SIM_API CUresult cuMemFreeHost(void *p)
{
    NEED_INIT();
    LOCK();
    void *had = hm_del(&drv.host, (uintptr_t)p);
    UNLOCK();
    if (!had)
        return CUDA_ERROR_INVALID_VALUE;
    free(p);
    return CUDA_SUCCESS;
}

/* ---- Copies and sets: validated no-ops ---- */

/* [p, p+n) must lie in one live allocation or mapping.  drv.mu held. */
static int dev_range_ok(unsigned long long p, unsigned long long n)
{
    struct region *r = live_containing(p);
    if (!r)
        return 0;
    if (r->kind == R_ALLOC)
        return p + n >= p && p + n <= r->base + r->size;
    struct mapping *m = mapping_containing(r, p);
    return m && p + n >= p && p + n <= m->va + m->size;
}

static int is_device_ptr(unsigned long long p)
{
    return live_containing(p) != NULL;
}

CUresult stream_ctx(CUstream s, struct sim_ctx **out);

enum { M_HOST = 1, M_DEV = 2, M_ANY = 3 };

/* Check a copy or set.  A synchronous copy (use_stream 0) then waits for the
 * work queued in the context, as one on the legacy stream does; other
 * copies and sets take no device time. */
static CUresult copy_check(unsigned long long dst, int dkind, unsigned long long src, int skind,
                           unsigned long long n, CUstream stream, int use_stream)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    LOCK();
    if (use_stream)
        rc = stream_ctx(stream, &c);
    if (!rc && n) {
        if ((dkind == M_DEV && !dev_range_ok(dst, n)) ||
            (skind == M_DEV && !dev_range_ok(src, n)) || (dkind == M_HOST && !dst) ||
            (skind == M_HOST && !src))
            rc = CUDA_ERROR_INVALID_VALUE;
        if (dkind == M_ANY && is_device_ptr(dst) && !dev_range_ok(dst, n))
            rc = CUDA_ERROR_INVALID_VALUE;
        if (skind == M_ANY && is_device_ptr(src) && !dev_range_ok(src, n))
            rc = CUDA_ERROR_INVALID_VALUE;
        if ((dkind == M_ANY && !dst) || (skind == M_ANY && !src))
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    unsigned long long until = !use_stream && skind ? c->last_end : 0;
    UNLOCK();
    if (!rc && until)
        wait_until(until);
    return rc;
}

#define HP(p) ((unsigned long long)(uintptr_t)(p))

SIM_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{ return copy_check(dst, M_ANY, src, M_ANY, ByteCount, NULL, 0); }
SIM_API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{ return copy_check(dst, M_ANY, src, M_ANY, ByteCount, NULL, 0); }
SIM_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{ return copy_check(dst, M_ANY, src, M_ANY, ByteCount, hStream, 1); }
SIM_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{ return copy_check(dst, M_ANY, src, M_ANY, ByteCount, hStream, 1); }

SIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{ return copy_check(dstDevice, M_DEV, HP(srcHost), M_HOST, ByteCount, NULL, 0); }
SIM_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{ return copy_check(dstDevice, M_DEV, HP(srcHost), M_HOST, ByteCount, NULL, 0); }
SIM_API CUresult cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount)
{ return copy_check(dstDevice, M_DEV, HP(srcHost), M_HOST, ByteCount, NULL, 0); }

SIM_API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{ return copy_check(HP(dstHost), M_HOST, srcDevice, M_DEV, ByteCount, NULL, 0); }
SIM_API CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{ return copy_check(HP(dstHost), M_HOST, srcDevice, M_DEV, ByteCount, NULL, 0); }
SIM_API CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount)
{ return copy_check(HP(dstHost), M_HOST, srcDevice, M_DEV, ByteCount, NULL, 0); }

SIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{ return copy_check(dstDevice, M_DEV, srcDevice, M_DEV, ByteCount, NULL, 0); }
SIM_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{ return copy_check(dstDevice, M_DEV, srcDevice, M_DEV, ByteCount, NULL, 0); }
SIM_API CUresult cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice, unsigned int ByteCount)
{ return copy_check(dstDevice, M_DEV, srcDevice, M_DEV, ByteCount, NULL, 0); }

SIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                      CUstream hStream)
{ return copy_check(dstDevice, M_DEV, HP(srcHost), M_HOST, ByteCount, hStream, 1); }
SIM_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                           size_t ByteCount, CUstream hStream)
{ return copy_check(dstDevice, M_DEV, HP(srcHost), M_HOST, ByteCount, hStream, 1); }
SIM_API CUresult cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void *srcHost,
                                   unsigned int ByteCount, CUstream hStream)
{ return copy_check(dstDevice, M_DEV, HP(srcHost), M_HOST, ByteCount, hStream, 1); }

SIM_API CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{ return copy_check(HP(dstHost), M_HOST, srcDevice, M_DEV, ByteCount, hStream, 1); }
SIM_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                           CUstream hStream)
{ return copy_check(HP(dstHost), M_HOST, srcDevice, M_DEV, ByteCount, hStream, 1); }
SIM_API CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount,
                                   CUstream hStream)
{ return copy_check(HP(dstHost), M_HOST, srcDevice, M_DEV, ByteCount, hStream, 1); }

SIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{ return copy_check(dstDevice, M_DEV, srcDevice, M_DEV, ByteCount, hStream, 1); }
SIM_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                           size_t ByteCount, CUstream hStream)
{ return copy_check(dstDevice, M_DEV, srcDevice, M_DEV, ByteCount, hStream, 1); }
SIM_API CUresult cuMemcpyDtoDAsync(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                                   unsigned int ByteCount, CUstream hStream)
{ return copy_check(dstDevice, M_DEV, srcDevice, M_DEV, ByteCount, hStream, 1); }

static CUresult set_check(unsigned long long dst, unsigned long long n, CUstream s, int use_stream)
{
    if (n > (1ULL << 62))
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return copy_check(dst, M_DEV, 0, 0, n, s, use_stream);
}

SIM_API CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{ return set_check(dstDevice, N, NULL, 0); }
SIM_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{ return set_check(dstDevice, N, NULL, 0); }
SIM_API CUresult cuMemsetD8(CUdeviceptr_v1 dstDevice, unsigned char uc, unsigned int N)
{ return set_check(dstDevice, N, NULL, 0); }
SIM_API CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{ return set_check(dstDevice, 4ULL * N, NULL, 0); }
SIM_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{ return set_check(dstDevice, 4ULL * N, NULL, 0); }
SIM_API CUresult cuMemsetD32(CUdeviceptr_v1 dstDevice, unsigned int ui, unsigned int N)
{ return set_check(dstDevice, 4ULL * N, NULL, 0); }
SIM_API CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{ return set_check(dstDevice, N, hStream, 1); }
SIM_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                      CUstream hStream)
{ return set_check(dstDevice, N, hStream, 1); }
SIM_API CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{ return set_check(dstDevice, 4ULL * N, hStream, 1); }
SIM_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                       CUstream hStream)
{ return set_check(dstDevice, 4ULL * N, hStream, 1); }

SIM_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    NEED_INIT();
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct region *r = live_containing(ptr);
    if (!r) {
        /* Host memory from cuMemAllocHost (looked up by its start). */
        int host = hm_get(&drv.host, (uintptr_t)ptr) != NULL;
        UNLOCK();
        if (!host)
            return CUDA_ERROR_INVALID_VALUE;
        switch (attribute) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned int *)data = CU_MEMORYTYPE_HOST; break;
        case CU_POINTER_ATTRIBUTE_HOST_POINTER: *(void **)data = (void *)(uintptr_t)ptr; break;
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; break;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned int *)data = 0; break;
        case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = 1; break;
        default: return CUDA_ERROR_INVALID_VALUE;
        }
        return CUDA_SUCCESS;
    }
    unsigned long long base = r->base, size = r->req;
    int phys = r->phys;
    struct mapping *m = NULL;
    if (r->kind == R_RESERVE) {
        m = mapping_containing(r, ptr);
        if (!m) {
            UNLOCK();
            return CUDA_ERROR_INVALID_VALUE;
        }
        base = m->va;
        size = m->size;
        phys = m->h->phys;
    }
    CUresult rc = CUDA_SUCCESS;
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = (CUcontext)r->ctx; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned int *)data = CU_MEMORYTYPE_DEVICE; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: rc = CUDA_ERROR_INVALID_VALUE; break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(int *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = r->id; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned int *)data = (unsigned)r->managed; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = phys >= 0 ? drv.ord[phys] : -1; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = 1; break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: *(CUdeviceptr *)data = base; break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: *(size_t *)data = size; break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(CUmemoryPool *)data = (CUmemoryPool)r->pool; break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *(unsigned int *)data = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE; break;
    default: rc = CUDA_ERROR_INVALID_VALUE; break;
    }
    UNLOCK();
    return rc;
}
