/* The simulated CUDA driver (libcuda.so.1). Device memory: allocation, free,
 * info; pinned host memory; pointer attributes.  Copies and sets are in
 * cuda_transfer.c, cuda_copy.c and cuda_memset.c; the bytes behind device
 * addresses in cuda_backing.c. */
#include "cuda_sim.h"

#include "cgpu_sizes.h"

#include <sys/mman.h>

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
    if ((managed && backing_managed(addr, foot)) || live_insert(r)) {
        if (managed)
            backing_free(addr, foot, 1);
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
    if (r->ipc)
        backing_unmap(r->base, r->size);
    else if (r->touched || r->managed) /* no syscall for memory nothing reached */
        backing_free(r->base, r->size, r->managed);
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
    unsigned long long pitch = cgpu_pitch(width); /* as the shim charges it (cgpu_sizes.h) */
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

/* ------------------------------------------------------------------------ */
/* Pinned host memory: real host memory, never charged to a device.  With
 * unified addressing its device address is its host address.              */

struct hrange *host_range(unsigned long long p)
{
    size_t lo = 0, hi = drv.nhr;
    while (lo < hi) { /* first range with base > p */
        size_t mid = (lo + hi) / 2;
        if (drv.hr[mid].base > p)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (!lo)
        return NULL;
    struct hrange *h = &drv.hr[lo - 1];
    return p - h->base < h->size ? h : NULL;
}

/* Add [base, base+size); -1 when it overlaps a range or out of memory. */
static int host_add(unsigned long long base, unsigned long long size, unsigned flags, int registered,
                    struct sim_ctx *ctx)
{
    size_t i = 0;
    while (i < drv.nhr && drv.hr[i].base < base)
        i++;
    if ((i > 0 && drv.hr[i - 1].base + drv.hr[i - 1].size > base) ||
        (i < drv.nhr && drv.hr[i].base < base + size))
        return -1;
    if (drv.nhr == drv.caphr) {
        size_t ncap = drv.caphr ? drv.caphr * 2 : 16;
        struct hrange *n = realloc(drv.hr, ncap * sizeof *n);
        if (!n)
            return -2;
        drv.hr = n;
        drv.caphr = ncap;
    }
    memmove(&drv.hr[i + 1], &drv.hr[i], (drv.nhr - i) * sizeof *drv.hr);
    drv.hr[i] = (struct hrange){base, size, flags, registered, ctx, ++drv.next_id};
    drv.nhr++;
    return 0;
}

static void host_remove(struct hrange *h)
{
    size_t i = (size_t)(h - drv.hr);
    memmove(&drv.hr[i], &drv.hr[i + 1], (drv.nhr - i - 1) * sizeof *drv.hr);
    drv.nhr--;
}

static CUresult host_alloc(void **pp, size_t bytesize, unsigned flags)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!pp || !bytesize)
        return CUDA_ERROR_INVALID_VALUE;
    size_t len = (size_t)round_up(bytesize, 4096);
    if (len < bytesize)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    LOCK();
    int err = host_add((uintptr_t)p, bytesize, flags, 0, c);
    UNLOCK();
    if (err) {
        munmap(p, len);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

#define HOSTALLOC_FLAGS \
    ((unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))

SIM_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return host_alloc(pp, bytesize, 0);
}

SIM_API CUresult cuMemAllocHost(void **pp, unsigned int bytesize)
{
    return host_alloc(pp, bytesize, 0);
}

SIM_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    if (INITED() && (Flags & ~HOSTALLOC_FLAGS))
        return CUDA_ERROR_INVALID_VALUE;
    return host_alloc(pp, bytesize, Flags);
}

SIM_API CUresult cuMemFreeHost(void *p)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    LOCK();
    struct hrange *h = host_range((uintptr_t)p);
    unsigned long long size = 0;
    if (h && h->base == (uintptr_t)p && !h->registered) {
        size = h->size;
        host_remove(h);
    }
    UNLOCK();
    if (!size)
        return CUDA_ERROR_INVALID_VALUE;
    munmap(p, (size_t)round_up(size, 4096));
    return CUDA_SUCCESS;
}

#define HOSTREGISTER_FLAGS                                                       \
    ((unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |    \
                CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY))

static CUresult host_register(void *p, size_t bytesize, unsigned int flags)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!p || !bytesize || (flags & ~HOSTREGISTER_FLAGS))
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & CU_MEMHOSTREGISTER_IOMEMORY)
        return CUDA_ERROR_NOT_SUPPORTED; /* no I/O memory here */
    unsigned long long a = (uintptr_t)p, end = a + bytesize;
    if (end < a || backing_is_device(a) || backing_is_device(end - 1))
        return CUDA_ERROR_INVALID_VALUE;
    /* The pages must exist, as the driver pins them. */
    unsigned long long pa = a & ~4095ULL;
    if (msync((void *)(uintptr_t)pa, (size_t)(end - pa), MS_ASYNC))
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    int err = host_add(a, bytesize, flags, 1, c);
    UNLOCK();
    return err == -1 ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
           : err     ? CUDA_ERROR_OUT_OF_MEMORY
                     : CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    return host_register(p, bytesize, Flags);
}

SIM_API CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return host_register(p, bytesize, Flags);
}

SIM_API CUresult cuMemHostUnregister(void *p)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct hrange *h = host_range((uintptr_t)p);
    rc = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    if (h && h->base == (uintptr_t)p && h->registered) {
        host_remove(h);
        rc = CUDA_SUCCESS;
    }
    UNLOCK();
    return rc;
}

static CUresult host_dev_ptr(unsigned long long *out, void *p, unsigned int flags)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!out || flags)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct hrange *h = host_range((uintptr_t)p);
    UNLOCK();
    if (!h)
        return CUDA_ERROR_INVALID_VALUE;
    *out = (uintptr_t)p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    unsigned long long d;
    CUresult rc = host_dev_ptr(&d, p, Flags);
    if (!rc)
        *pdptr = d;
    return rc;
}

SIM_API CUresult cuMemHostGetDevicePointer(CUdeviceptr_v1 *pdptr, void *p, unsigned int Flags)
{
    unsigned long long d;
    CUresult rc = host_dev_ptr(&d, p, Flags);
    if (!rc && d > UINT_MAX)
        rc = CUDA_ERROR_INVALID_VALUE; /* not reachable through a 32-bit pointer */
    if (!rc)
        *pdptr = (CUdeviceptr_v1)d;
    return rc;
}

SIM_API CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!pFlags)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct hrange *h = host_range((uintptr_t)p);
    int ok = h && !h->registered;
    /* Under unified addressing every allocation is mapped. */
    unsigned flags = ok ? h->flags | CU_MEMHOSTALLOC_DEVICEMAP : 0;
    UNLOCK();
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    *pFlags = flags;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Pointer attributes                                                        */

/* What one pointer is: device memory (a region, maybe a mapping of a
 * reservation) or pinned host memory. */
struct ptr_info {
    int kind;                     /* 0: unknown, 1: device, 2: pinned host */
    struct sim_ctx *ctx;
    int phys, managed, ipc_capable;
    unsigned long long range_base, range_size, map_base, map_size, id, handle_types;
    struct sim_pool *pool;
};

static void ptr_info(unsigned long long ptr, struct ptr_info *pi)
{
    memset(pi, 0, sizeof *pi);
    struct region *r = live_containing(ptr);
    if (r && r->kind == R_ALLOC) {
        *pi = (struct ptr_info){1, r->ctx, r->phys, r->managed,
                                !r->pool && !r->managed && !r->ipc && r->phys >= 0,
                                r->base, r->req, r->base, r->req, r->id, 0, r->pool};
        if (ptr - r->base >= r->req)
            pi->kind = 0; /* the rounding past the end is no allocation */
        return;
    }
    if (r) {
        struct mapping *m = mapping_containing(r, ptr);
        if (m)
            *pi = (struct ptr_info){1, NULL, m->h->phys, 0, 0, r->base, r->size, m->va, m->size,
                                    (uintptr_t)m->h, m->h->prop.requestedHandleTypes, NULL};
        return;
    }
    struct hrange *h = host_range(ptr);
    if (h)
        *pi = (struct ptr_info){2, h->ctx, h->ctx ? h->ctx->phys : -1, 0, 0, h->base, h->size,
                                h->base, h->size, h->id, 0, NULL};
}

/* One attribute of a known pointer; CUDA_ERROR_INVALID_VALUE when it has none. */
static CUresult attr_of(const struct ptr_info *pi, CUpointer_attribute a, void *data,
                        unsigned long long ptr)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = (CUcontext)pi->ctx; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = pi->kind == 2 ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (pi->kind == 1 && !pi->managed)
            return CUDA_ERROR_INVALID_VALUE; /* device memory has no host address */
        *(void **)data = (void *)(uintptr_t)ptr;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(int *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = pi->id; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned int *)data = (unsigned)pi->managed; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = pi->phys >= 0 ? drv.ord[pi->phys] : -1;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *(int *)data = pi->ipc_capable; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = pi->range_base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = pi->range_size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = 1; break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = pi->handle_types;
        break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: *(int *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned int *)data = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(CUmemoryPool *)data = (CUmemoryPool)pi->pool; break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: *(size_t *)data = pi->map_size; break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: *(CUdeviceptr *)data = pi->map_base; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: *(unsigned long long *)data = pi->id; break;
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE: *(int *)data = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE; /* P2P tokens: no kernel interface here */
    }
    return CUDA_SUCCESS;
}

/* The size an attribute's value takes, 0 for an unknown attribute. */
static size_t attr_size(CUpointer_attribute a)
{
    switch (a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        return 8;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        return 4;
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
        return sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS);
    default:
        return 0;
    }
}

SIM_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    NEED_INIT();
    if (!data || !attr_size(attribute))
        return CUDA_ERROR_INVALID_VALUE;
    struct ptr_info pi;
    LOCK();
    ptr_info(ptr, &pi);
    CUresult rc = pi.kind ? attr_of(&pi, attribute, data, ptr) : CUDA_ERROR_INVALID_VALUE;
    UNLOCK();
    return rc;
}

SIM_API CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                        void **data, CUdeviceptr ptr)
{
    NEED_INIT();
    if (!numAttributes || !attributes || !data)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < numAttributes; i++)
        if (!attr_size(attributes[i]) || !data[i])
            return CUDA_ERROR_INVALID_VALUE;
    struct ptr_info pi;
    LOCK();
    ptr_info(ptr, &pi);
    /* Unknown pointers and attributes a pointer lacks read as zero (NULL),
     * as the header says; the memory type 0 is cudart's "unregistered". */
    for (unsigned i = 0; i < numAttributes; i++) {
        if (!pi.kind || attr_of(&pi, attributes[i], data[i], ptr))
            memset(data[i], 0, attr_size(attributes[i]));
    }
    UNLOCK();
    return CUDA_SUCCESS;
}
