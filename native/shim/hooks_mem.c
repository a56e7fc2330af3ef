/* The allocation families of the CUDA driver API: classic, pitched, managed,
 * stream-ordered, arrays and mipmapped arrays.  Each wrapper charges through
 * charge.h; a free of a pointer the shim never saw still reaches the driver. */
#include "charge.h"

#include "cgpu_sizes.h"

/* ---- allocation families ------------------------------------------------------ */

/* Linear device memory records no context: learned when one may die (hooks_ctx.c). */

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CHARGED_ALLOC(current_device(), charge_of(bytesize), REAL(cuMemAlloc_v2)(dptr, bytesize), PT_KIND_PTR ^ *dptr, PT_CTX_UNKNOWN);
}

EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    CHARGED_ALLOC(current_device(), charge_of(bytesize), REAL(cuMemAlloc)(dptr, bytesize), PT_KIND_PTR ^ *dptr, PT_CTX_UNKNOWN);
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                   unsigned int ElementSizeBytes)
{
    CHARGED_ALLOC(current_device(), charge_of(cgpu_pitch(WidthInBytes) * Height),
                  REAL(cuMemAllocPitch_v2)(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes),
                  PT_KIND_PTR ^ *dptr, PT_CTX_UNKNOWN);
}

EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int WidthInBytes,
                                unsigned int Height, unsigned int ElementSizeBytes)
{
    CHARGED_ALLOC(current_device(), charge_of(cgpu_pitch(WidthInBytes) * Height),
                  REAL(cuMemAllocPitch)(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes),
                  PT_KIND_PTR ^ *dptr, PT_CTX_UNKNOWN);
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

/* Stream-ordered allocation: charged at allocation; at the free call the charge
 * moves to what the pools keep (charge.h), credited once the driver trims them.
 *
 * A pool or a stream may belong to another device than the current context's.  A
 * process that sees one device cannot get that wrong; with several, the device is
 * read from the new pointer and the charge made afterwards: over the slice, the
 * memory is handed back to the pool, where it stays charged, and the call fails.
 * The same order serves a process whose pools keep memory and whose slice is
 * full: the pool may serve the allocation from what it keeps, which the charge
 * afterwards sees (reserve's slow path asks the pools). */
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
        if (free_async(*dptr, stream) == CUDA_SUCCESS) { /* the pool keeps it */
            (void)ledger_charge(&g_shim.ledger, (unsigned)dev, charge, 1);
            __atomic_add_fetch(&g_pool_kept[dev], charge, __ATOMIC_RELAXED);
        }
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    track(PT_KIND_PTR ^ *dptr, dev, charge, NULL);
    return rc;
}

/* The slice has no room for `bytesize` more, but would have if the pools on `dev`
 * served it from what they keep. */
static inline int pool_may_serve(int dev, size_t bytesize)
{
    uint64_t kept;
    if (dev < 0 || !(kept = __atomic_load_n(&g_pool_kept[dev], __ATOMIC_RELAXED)))
        return 0;
    uint64_t need = ledger_view_used(&g_shim.ledger, (unsigned)dev) + charge_of(bytesize);
    uint64_t limit = g_shim.ledger.limit[dev];
    return need > limit && need - kept <= limit;
}

/* Whether `stream` is capturing into a graph: then cuMemAllocAsync allocates nothing but
 * adds an allocation node, whose memory is charged with the graph's (hooks_graph.c).  The
 * legacy default stream never captures (no driver call for it). */
typedef CUresult (*is_capturing_fn)(CUstream, CUstreamCaptureStatus *);
static is_capturing_fn capturing_fn[2];

static inline int capturing(CUstream stream, int ptsz)
{
    if (!ptsz && (!stream || stream == CU_STREAM_LEGACY))
        return 0;
    is_capturing_fn fn = __atomic_load_n(&capturing_fn[ptsz], __ATOMIC_RELAXED);
    if (unlikely(!fn)) {
        fn = (is_capturing_fn)shim_driver_sym(ptsz ? "cuStreamIsCapturing_ptsz" : "cuStreamIsCapturing");
        if (!fn)
            return 0;
        __atomic_store_n(&capturing_fn[ptsz], fn, __ATOMIC_RELAXED);
    }
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return fn(stream, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

#define ASYNC_ALLOC(call, free_fn, ptsz)                                                            \
    do {                                                                                           \
        int m_ = mode();                                                                           \
        if (m_ == SHIM_LIMITED && capturing(hStream, ptsz))                                        \
            return call; /* a graph's allocation node: charged at instantiation */                 \
        if (m_ == SHIM_LIMITED && (g_shim.single_device == SHIM_MULTI_DEVICE ||                     \
                                   unlikely(pool_may_serve(current_device(), bytesize))))           \
            return charge_async_after(call, dptr, bytesize, hStream, free_fn);                     \
        CHARGED_ALLOC(current_device(), charge_of(bytesize), call, PT_KIND_PTR ^ *dptr, NULL);     \
    } while (0)

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    ASYNC_ALLOC(REAL(cuMemAllocAsync)(dptr, bytesize, hStream), REAL(cuMemFreeAsync), 0);
}

EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    ASYNC_ALLOC(REAL(cuMemAllocAsync_ptsz)(dptr, bytesize, hStream), REAL(cuMemFreeAsync_ptsz), 1);
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    pool_seen(pool);
    ASYNC_ALLOC(REAL(cuMemAllocFromPoolAsync)(dptr, bytesize, pool, hStream), REAL(cuMemFreeAsync), 0);
}

EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream)
{
    pool_seen(pool);
    ASYNC_ALLOC(REAL(cuMemAllocFromPoolAsync_ptsz)(dptr, bytesize, pool, hStream), REAL(cuMemFreeAsync_ptsz), 1);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    POOL_FREE(PT_KIND_PTR ^ dptr, REAL(cuMemFreeAsync)(dptr, hStream));
}

EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    POOL_FREE(PT_KIND_PTR ^ dptr, REAL(cuMemFreeAsync_ptsz)(dptr, hStream));
}

/* Arrays: the size follows from the descriptor, as the simulator computes it (cgpu_sizes.h); a
 * descriptor the driver refuses is charged nothing. */
static uint64_t array_charge(uint64_t w, uint64_t h, uint64_t d, CUarray_format f, unsigned channels,
                             unsigned flags, unsigned levels)
{
    CUDA_ARRAY3D_DESCRIPTOR desc = {.Width = w, .Height = h, .Depth = d, .Format = f, .NumChannels = channels,
                                    .Flags = flags};
    int known;
    return charge_of(cgpu_array_bytes(&desc, levels, &known));
}

EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    CHARGED_ALLOC(current_device(), desc ? array_charge(desc->Width, desc->Height, 0, desc->Format, desc->NumChannels, 0, 1) : 0,
                  REAL(cuArrayCreate_v2)(pHandle, desc), PT_KIND_ARRAY ^ (uint64_t)(uintptr_t)*pHandle, current_context());
}

EXPORT CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *desc)
{
    CHARGED_ALLOC(current_device(), desc ? array_charge(desc->Width, desc->Height, 0, desc->Format, desc->NumChannels, 0, 1) : 0,
                  REAL(cuArrayCreate)(pHandle, desc), PT_KIND_ARRAY ^ (uint64_t)(uintptr_t)*pHandle, current_context());
}

EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    CHARGED_ALLOC(current_device(),
                  desc ? array_charge(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels, desc->Flags, 1) : 0,
                  REAL(cuArray3DCreate_v2)(pHandle, desc), PT_KIND_ARRAY ^ (uint64_t)(uintptr_t)*pHandle, current_context());
}

EXPORT CUresult cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc)
{
    CHARGED_ALLOC(current_device(),
                  desc ? array_charge(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels, desc->Flags, 1) : 0,
                  REAL(cuArray3DCreate)(pHandle, desc), PT_KIND_ARRAY ^ (uint64_t)(uintptr_t)*pHandle, current_context());
}

EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                       unsigned int numMipmapLevels)
{
    CHARGED_ALLOC(current_device(),
                  desc ? array_charge(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels,
                                      desc->Flags, numMipmapLevels)
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


/* ---- pools made with cuMemPoolCreate --------------------------------------------- */

/* A pool reserves device memory as it serves allocations (charged by the allocation
 * wrappers above) and keeps what is freed into it (charged until the driver gives it
 * back, charge.h).  Creating a pool makes it known to pool_reconcile, so that what it
 * keeps is credited once it no longer does; its trim and its destruction give memory
 * back, and are credited at once. */
EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    CUresult rc = REAL(cuMemPoolCreate)(pool, poolProps);
    if (rc == CUDA_SUCCESS && pool && mode() == SHIM_LIMITED)
        pool_seen(*pool);
    return rc;
}

EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    CUresult rc = REAL(cuMemPoolDestroy)(pool);
    if (rc == CUDA_SUCCESS && mode() == SHIM_LIMITED) {
        pool_forget(pool);
        (void)pool_reconcile();
    }
    return rc;
}

EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    CUresult rc = REAL(cuMemPoolTrimTo)(pool, minBytesToKeep);
    if (rc == CUDA_SUCCESS && mode() == SHIM_LIMITED)
        (void)pool_reconcile();
    return rc;
}

/* ---- memory imported over IPC ------------------------------------------------------ */

/* An imported allocation is the exporter's memory, and stays charged to the exporter.
 * It is charged to the importer too, while the importer holds it open: the driver keeps
 * the memory alive for as long as any importer maps it, so an exporter that frees first
 * (credited) and allocates again could otherwise hold an unbounded amount through its
 * importers (docs/contract.md, "IPC").  The size is known only once the handle is
 * open: over the slice, the import is closed again and refused. */
static CUresult charge_import(CUresult rc, CUdeviceptr *pdptr)
{
    if (rc != CUDA_SUCCESS || !pdptr || mode() != SHIM_LIMITED)
        return rc;
    /* The device the memory lives on, which may be a peer of the current one. */
    CUresult (*attr)(void *, CUpointer_attribute, CUdeviceptr) =
        (CUresult(*)(void *, CUpointer_attribute, CUdeviceptr))shim_driver_sym("cuPointerGetAttribute");
    int ordinal = -1;
    if (!attr || attr(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, *pdptr) != CUDA_SUCCESS)
        ordinal = -1;
    int dev = ordinal >= 0 ? device_of_ordinal(ordinal) : current_device();
    if (dev < 0)
        return rc;
    CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr) =
        (CUresult(*)(CUdeviceptr *, size_t *, CUdeviceptr))shim_driver_sym("cuMemGetAddressRange_v2");
    CUdeviceptr base = 0;
    size_t size = 0;
    if (!range || range(&base, &size, *pdptr) != CUDA_SUCCESS || !size)
        return rc; /* cannot tell: the host view shows it */
    uint64_t charge = charge_of(size);
    if (reserve(dev, charge) != CUDA_SUCCESS) {
        (void)REAL(cuIpcCloseMemHandle)(*pdptr);
        *pdptr = 0;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    track(PT_KIND_IPC ^ *pdptr, dev, charge, current_context());
    return rc;
}

EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return charge_import(REAL(cuIpcOpenMemHandle_v2)(pdptr, handle, Flags), pdptr);
}

EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return charge_import(REAL(cuIpcOpenMemHandle)(pdptr, handle, Flags), pdptr);
}

EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CHARGED_FREE(PT_KIND_IPC ^ dptr, REAL(cuIpcCloseMemHandle)(dptr));
}
