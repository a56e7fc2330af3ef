/* The simulated CUDA driver (libcuda.so.1). Virtual memory management:
 * cuMemCreate, reserve, map, access. */
#include "cuda_sim.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Virtual memory management                                                 */

/* prop->location -> physical device, -1 for host locations; -2 invalid. */
int location_phys(const CUmemLocation *loc, CUresult *err)
{
    switch (loc->type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: {
        int phys = dev_phys(loc->id);
        if (phys < 0) {
            *err = CUDA_ERROR_INVALID_DEVICE;
            return -2;
        }
        return phys;
    }
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        return -1;
    default:
        *err = CUDA_ERROR_INVALID_VALUE;
        return -2;
    }
}

SIM_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
    NEED_INIT();
    if (!granularity || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED && prop->type != CU_MEM_ALLOCATION_TYPE_MANAGED)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult err = CUDA_SUCCESS;
    if (location_phys(&prop->location, &err) == -2)
        return err;
    *granularity = drv.cfg.granularity;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    NEED_INIT();
    if (!handle || !prop || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED && prop->type != CU_MEM_ALLOCATION_TYPE_MANAGED)
        return CUDA_ERROR_INVALID_VALUE;
    if (!size || size % drv.cfg.granularity)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    int phys = location_phys(&prop->location, &rc);
    if (phys == -2)
        return rc;
    unsigned long long chg = phys >= 0 ? size : 0;
    LOCK();
    struct sim_vmm *h = NULL;
    rc = charge(phys, chg);
    if (!rc) {
        unsigned long long off = 0;
        h = backing_phys_alloc(size, &off) ? NULL : obj_new(sizeof *h, O_VMM, NULL);
        if (!h && off)
            backing_phys_free(off, size);
        if (h) {
            h->off = off;
            h->fd = -1;
            h->phys = phys;
            h->size = size;
            h->charge = chg;
            h->prop = *prop;
            h->refs = 1;
        } else {
            uncharge(phys, chg);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    UNLOCK();
    if (rc)
        return rc;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

/* The physical memory goes when no handle reference and no mapping is left. */
static void vmm_maybe_destroy(struct sim_vmm *h)
{
    if (h->refs > 0 || h->maps > 0)
        return;
    uncharge(h->phys, h->charge);
    if (h->fd >= 0)
        close(h->fd); /* its pages go with the last descriptor and mapping */
    else
        backing_phys_free(h->off, h->size);
    obj_free(h);
}

SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    NEED_INIT();
    LOCK();
    struct sim_vmm *h = obj_get((void *)(uintptr_t)handle, O_VMM);
    if (!h || h->refs <= 0) {
        UNLOCK();
        return CUDA_ERROR_INVALID_VALUE;
    }
    h->refs--;
    vmm_maybe_destroy(h);
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                        CUmemGenericAllocationHandle handle)
{
    NEED_INIT();
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_vmm *h = obj_get((void *)(uintptr_t)handle, O_VMM);
    if (h)
        *prop = h->prop;
    UNLOCK();
    return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags)
{
    NEED_INIT();
    unsigned long long gran = drv.cfg.granularity;
    if (!ptr || !size || size % gran || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (alignment & (alignment - 1))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long align = alignment > gran ? alignment : gran;
    if (align < 512)
        align = 512;
    struct region *r = calloc(1, sizeof *r);
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    LOCK();
    unsigned long long at;
    if (zone_take(&drv.zone[1], size, align, addr, &at)) {
        UNLOCK();
        free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->base = at;
    r->size = size;
    r->req = size;
    r->kind = R_RESERVE;
    r->phys = -1;
    r->id = ++drv.next_id;
    if (live_insert(r)) {
        zone_give(&drv.zone[1], at, size);
        UNLOCK();
        free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    UNLOCK();
    *ptr = at;
    return CUDA_SUCCESS;
}

static void unmap_at(struct region *r, size_t i)
{
    struct sim_vmm *h = r->maps[i].h;
    backing_unmap(r->maps[i].va, r->maps[i].size);
    memmove(&r->maps[i], &r->maps[i + 1], (r->nmaps - i - 1) * sizeof *r->maps);
    r->nmaps--;
    h->maps--;
    vmm_maybe_destroy(h);
}

SIM_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    NEED_INIT();
    LOCK();
    struct region *r = live_exact(ptr);
    if (!r || r->kind != R_RESERVE || r->size != size) {
        UNLOCK();
        return CUDA_ERROR_INVALID_VALUE;
    }
    while (r->nmaps)
        unmap_at(r, r->nmaps - 1);
    live_remove(r);
    zone_give(&drv.zone[1], r->base, r->size);
    free(r->maps);
    free(r);
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    NEED_INIT();
    if (!size || flags || size % drv.cfg.granularity || offset % drv.cfg.granularity)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    struct sim_vmm *h = obj_get((void *)(uintptr_t)handle, O_VMM);
    struct region *r = live_containing(ptr);
    if (!h || h->refs <= 0 || !r || r->kind != R_RESERVE)
        goto out;
    if (ptr + size < ptr || ptr + size > r->base + r->size || offset + size > h->size ||
        offset + size < offset)
        goto out;
    for (size_t i = 0; i < r->nmaps; i++)
        if (ptr < r->maps[i].va + r->maps[i].size && r->maps[i].va < ptr + size) {
            rc = CUDA_ERROR_ALREADY_MAPPED;
            goto out;
        }
    if (r->nmaps == r->capmaps) {
        size_t ncap = r->capmaps ? r->capmaps * 2 : 4;
        struct mapping *nm = realloc(r->maps, ncap * sizeof *nm);
        if (!nm) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        r->maps = nm;
        r->capmaps = ncap;
    }
    if (h->fd >= 0 ? backing_map(ptr, size, h->fd, offset)
                   : backing_phys_map(ptr, size, h->off + offset)) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    r->maps[r->nmaps++] = (struct mapping){ptr, size, offset, h, 0};
    h->maps++;
    rc = CUDA_SUCCESS;
out:
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    NEED_INIT();
    if (!size)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct region *r = live_containing(ptr);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (!r || r->kind != R_RESERVE || ptr + size > r->base + r->size)
        goto out;
    unsigned long long end = ptr + size;
    /* Every mapping touching the range must lie wholly inside it. */
    int found = 0;
    for (size_t i = 0; i < r->nmaps; i++) {
        struct mapping *m = &r->maps[i];
        if (m->va < end && ptr < m->va + m->size) {
            if (m->va < ptr || m->va + m->size > end)
                goto out;
            found = 1;
        }
    }
    if (!found)
        goto out;
    for (size_t i = r->nmaps; i-- > 0;)
        if (r->maps[i].va >= ptr && r->maps[i].va < end)
            unmap_at(r, i);
    rc = CUDA_SUCCESS;
out:
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
{
    NEED_INIT();
    if (!desc || !count || !size)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        CUresult err = CUDA_SUCCESS;
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE &&
            desc[i].location.type != CU_MEM_LOCATION_TYPE_HOST &&
            desc[i].location.type != CU_MEM_LOCATION_TYPE_HOST_NUMA)
            return CUDA_ERROR_INVALID_VALUE;
        if (location_phys(&desc[i].location, &err) == -2)
            return err;
        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    }
    LOCK();
    struct region *r = live_containing(ptr);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (r && r->kind == R_RESERVE && ptr + size <= r->base + r->size) {
        /* The whole range must be mapped. */
        unsigned long long covered = 0;
        for (size_t i = 0; i < r->nmaps; i++) {
            struct mapping *m = &r->maps[i];
            unsigned long long lo = m->va > ptr ? m->va : ptr;
            unsigned long long hi = m->va + m->size < ptr + size ? m->va + m->size : ptr + size;
            if (hi > lo)
                covered += hi - lo;
        }
        if (covered == size)
            rc = CUDA_SUCCESS;
    }
    /* What copies may do there: the most any device was granted (the copy
     * engines do not care which device's context issues a copy). */
    unsigned grant = 0;
    for (size_t i = 0; !rc && i < count; i++)
        if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE)
            grant |= (unsigned)desc[i].flags;
    for (size_t i = 0; !rc && i < r->nmaps; i++) {
        struct mapping *m = &r->maps[i];
        if (m->va < ptr + size && ptr < m->va + m->size)
            m->access = grant;
    }
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    NEED_INIT();
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct region *r = live_containing((unsigned long long)(uintptr_t)addr);
    struct mapping *m = r && r->kind == R_RESERVE ? mapping_containing(r, (uintptr_t)addr) : NULL;
    if (m) {
        m->h->refs++;
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->h;
    }
    UNLOCK();
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- Shareable handles: POSIX file descriptors ---- */

#define VMM_MAGIC "cgpuvmm"

/* What follows a shared handle's bytes in its file: its properties. */
struct vmm_tail {
    char magic[8];
    CUmemAllocationProp prop;
};

SIM_API CUresult cuMemExportToShareableHandle(void *shareableHandle,
                                              CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags)
{
    NEED_INIT();
    if (!shareableHandle || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED; /* no fabric, no Win32 here */
    LOCK();
    struct sim_vmm *h = obj_get((void *)(uintptr_t)handle, O_VMM);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (!h || h->refs <= 0 || !(h->prop.requestedHandleTypes & handleType))
        goto out; /* the type must have been asked for at cuMemCreate */
    if (h->fd < 0) {
        struct vmm_tail t = {.magic = VMM_MAGIC, .prop = h->prop};
        int fd = backing_phys_own(h->off, h->size, &t, sizeof t);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        if (fd < 0)
            goto out;
        /* Every mapping of the handle now shows the new file. */
        for (size_t i = 0; i < drv.nlive; i++) {
            struct region *r = drv.live[i];
            for (size_t k = 0; r->kind == R_RESERVE && k < r->nmaps; k++)
                if (r->maps[k].h == h)
                    backing_map(r->maps[k].va, r->maps[k].size, fd, r->maps[k].off);
        }
        backing_phys_free(h->off, h->size);
        h->fd = fd;
    }
    int out_fd = fcntl(h->fd, F_DUPFD, 0);
    rc = out_fd < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    if (!rc)
        *(int *)shareableHandle = out_fd;
out:
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                void *osHandle,
                                                CUmemAllocationHandleType shHandleType)
{
    NEED_INIT();
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    int fd = (int)(intptr_t)osHandle;
    struct stat st;
    struct vmm_tail t;
    if (fd < 0 || fstat(fd, &st) || st.st_size <= 4096)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long size = (unsigned long long)st.st_size - 4096;
    if (pread(fd, &t, sizeof t, (off_t)size) != (ssize_t)sizeof t ||
        memcmp(t.magic, VMM_MAGIC, sizeof t.magic) || size % drv.cfg.granularity)
        return CUDA_ERROR_INVALID_VALUE; /* not memory this driver exported */
    CUresult rc = CUDA_SUCCESS;
    int phys = location_phys(&t.prop.location, &rc);
    if (phys == -2)
        return rc;
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    LOCK();
    /* The exporter's memory: not charged again here. */
    struct sim_vmm *h = obj_new(sizeof *h, O_VMM, NULL);
    if (h) {
        h->phys = phys;
        h->size = size;
        h->prop = t.prop;
        h->refs = 1;
        h->fd = own;
    }
    UNLOCK();
    if (!h) {
        close(own);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}
