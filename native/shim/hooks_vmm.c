/* Virtual memory management (cuMemCreate and friends), which PyTorch's expandable
 * segments and NCCL use: memory lives until its handle is released and every
 * mapping of it is gone. */
#include "charge.h"

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
    ledger_lock(&g_shim.ledger);
    struct pt_entry *e = pt_find(&g_table, PT_KIND_HANDLE ^ *handle);
    if (e)
        e->aux = 1; /* the handle's own reference */
    ledger_unlock(&g_shim.ledger);
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
    /* Drop our reference first: once the driver frees the handle it may hand the same
     * value to another thread's cuMemCreate.  The charge goes only once the driver has
     * freed the memory: credited before, another process could take bytes we still hold. */
    ledger_lock(&g_shim.ledger);
    struct pt_entry *e = pt_find(&g_table, PT_KIND_HANDLE ^ handle);
    uint64_t key = e ? e->key : 0, bytes = 0;
    unsigned dev = 0;
    int last = 0;
    if (e && e->aux > 1)
        e->aux--; /* still mapped: the memory lives on */
    else if (e)
        last = pt_remove(&g_table, key, &dev, &bytes, NULL);
    ledger_unlock(&g_shim.ledger);
    CUresult rc = REAL(cuMemRelease)(handle);
    if (rc == CUDA_SUCCESS && last)
        unreserve((int)dev, bytes);
    if (rc != CUDA_SUCCESS && key) { /* refused: put the reference back */
        ledger_lock(&g_shim.ledger);
        if (!handle_ref_locked(handle) && pt_insert(&g_table, key, dev, bytes, NULL) == 0)
            pt_find(&g_table, key)->aux = 1;
        ledger_unlock(&g_shim.ledger);
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
    ledger_lock(&g_shim.ledger);
    if (handle_ref_locked(handle) && pt_insert(&g_table, PT_KIND_MAP ^ ptr, 0, size, NULL) == 0) {
        struct pt_entry *m = pt_find(&g_table, PT_KIND_MAP ^ ptr);
        m->aux = handle;
    }
    ledger_unlock(&g_shim.ledger);
    return rc;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult rc = REAL(cuMemUnmap)(ptr, size);
    if (rc != CUDA_SUCCESS || mode() != SHIM_LIMITED)
        return rc;
    ledger_lock(&g_shim.ledger);
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
    ledger_unlock(&g_shim.ledger);
    return rc;
}

EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult rc = REAL(cuMemRetainAllocationHandle)(handle, addr);
    if (rc == CUDA_SUCCESS && handle && mode() == SHIM_LIMITED) {
        ledger_lock(&g_shim.ledger);
        handle_ref_locked(*handle);
        ledger_unlock(&g_shim.ledger);
    }
    return rc;
}

