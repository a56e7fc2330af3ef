/* The simulated CUDA driver (libcuda.so.1). CUDA arrays and mipmapped arrays,
 * charged by their size. */
#include "cuda_sim.h"

#include "cgpu_sizes.h"

#include <sys/mman.h>

/* ------------------------------------------------------------------------ */
/* Arrays                                                                    */

/* Bytes of an array (cgpu_sizes.h: the shim charges the same); 0 for a descriptor the driver
 * refuses, or of a format the simulator does not know. */
static unsigned long long array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *a, unsigned levels)
{
    int known;
    unsigned long long bytes = cgpu_array_bytes(a, levels, &known);
    return known ? bytes : 0;
}

static CUresult array_create(void **out, const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned levels,
                             int type)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!out || !desc || !desc->Width)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long bytes = array_bytes(desc, levels);
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long chg = round_up(bytes, drv.cfg.granularity);
    LOCK();
    struct sim_array *a = NULL;
    rc = charge(c->phys, chg);
    if (!rc) {
        a = obj_new(sizeof *a, type, c);
        if (a) {
            a->phys = c->phys;
            a->desc = *desc;
            a->levels = levels;
            a->charge = chg;
            /* Bytes for copies (plain arrays): rows of level 0, lazily backed. */
            unsigned long long rows = desc->Height ? desc->Height : 1;
            unsigned long long slices = desc->Depth ? desc->Depth : 1;
            int known;
            a->row_bytes = cgpu_array_level_bytes(desc->Format, desc->NumChannels, desc->Width, 1, 1, &known);
            a->bytes = a->row_bytes * rows * slices;
            if (type == O_ARRAY) {
                void *p = mmap(NULL, a->bytes > bytes ? a->bytes : bytes, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
                if (p == MAP_FAILED) {
                    obj_free(a);
                    a = NULL;
                    uncharge(c->phys, chg);
                    rc = CUDA_ERROR_OUT_OF_MEMORY;
                } else {
                    a->bk = p;
                }
            }
        } else {
            uncharge(c->phys, chg);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    UNLOCK();
    if (rc)
        return rc;
    *out = a;
    return CUDA_SUCCESS;
}

void array_free_locked(struct sim_array *a)
{
    uncharge(a->phys, a->charge);
    if (a->bk) {
        unsigned long long bytes = array_bytes(&a->desc, a->levels);
        munmap(a->bk, a->bytes > bytes ? a->bytes : bytes);
    }
    obj_free(a);
}

static CUresult array_destroy(void *h, int type)
{
    NEED_INIT();
    LOCK();
    struct sim_array *a = obj_get(h, type);
    if (a)
        array_free_locked(a);
    UNLOCK();
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIM_API CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
    CUDA_ARRAY3D_DESCRIPTOR d = {0};
    if (pAllocateArray) {
        d.Width = pAllocateArray->Width;
        d.Height = pAllocateArray->Height;
        d.Format = pAllocateArray->Format;
        d.NumChannels = pAllocateArray->NumChannels;
    }
    return array_create((void **)pHandle, pAllocateArray ? &d : NULL, 0, O_ARRAY);
}

SIM_API CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *pAllocateArray)
{
    CUDA_ARRAY3D_DESCRIPTOR d = {0};
    if (pAllocateArray) {
        d.Width = pAllocateArray->Width;
        d.Height = pAllocateArray->Height;
        d.Format = pAllocateArray->Format;
        d.NumChannels = pAllocateArray->NumChannels;
    }
    return array_create((void **)pHandle, pAllocateArray ? &d : NULL, 0, O_ARRAY);
}

SIM_API CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
    return array_create((void **)pHandle, pAllocateArray, 0, O_ARRAY);
}

SIM_API CUresult cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *pAllocateArray)
{
    CUDA_ARRAY3D_DESCRIPTOR d = {0};
    if (pAllocateArray) {
        d.Width = pAllocateArray->Width;
        d.Height = pAllocateArray->Height;
        d.Depth = pAllocateArray->Depth;
        d.Format = pAllocateArray->Format;
        d.NumChannels = pAllocateArray->NumChannels;
        d.Flags = pAllocateArray->Flags;
    }
    return array_create((void **)pHandle, pAllocateArray ? &d : NULL, 0, O_ARRAY);
}

SIM_API CUresult cuArrayDestroy(CUarray hArray)
{
    return array_destroy(hArray, O_ARRAY);
}

static CUresult array_desc(CUarray h, CUDA_ARRAY3D_DESCRIPTOR *out)
{
    NEED_INIT();
    LOCK();
    struct sim_array *a = obj_get(h, O_ARRAY);
    if (a)
        *out = a->desc;
    UNLOCK();
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIM_API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *pArrayDescriptor, CUarray hArray)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUresult rc = array_desc(hArray, &d);
    if (rc)
        return rc;
    if (!pArrayDescriptor)
        return CUDA_ERROR_INVALID_VALUE;
    pArrayDescriptor->Width = d.Width;
    pArrayDescriptor->Height = d.Height;
    pArrayDescriptor->Format = d.Format;
    pArrayDescriptor->NumChannels = d.NumChannels;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuArrayGetDescriptor(CUDA_ARRAY_DESCRIPTOR_v1 *pArrayDescriptor, CUarray hArray)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUresult rc = array_desc(hArray, &d);
    if (rc)
        return rc;
    if (!pArrayDescriptor)
        return CUDA_ERROR_INVALID_VALUE;
    pArrayDescriptor->Width = (unsigned int)d.Width;
    pArrayDescriptor->Height = (unsigned int)d.Height;
    pArrayDescriptor->Format = d.Format;
    pArrayDescriptor->NumChannels = d.NumChannels;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor, CUarray hArray)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUresult rc = array_desc(hArray, &d);
    if (rc)
        return rc;
    if (!pArrayDescriptor)
        return CUDA_ERROR_INVALID_VALUE;
    *pArrayDescriptor = d;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR_v1 *pArrayDescriptor, CUarray hArray)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUresult rc = array_desc(hArray, &d);
    if (rc)
        return rc;
    if (!pArrayDescriptor)
        return CUDA_ERROR_INVALID_VALUE;
    pArrayDescriptor->Width = (unsigned int)d.Width;
    pArrayDescriptor->Height = (unsigned int)d.Height;
    pArrayDescriptor->Depth = (unsigned int)d.Depth;
    pArrayDescriptor->Format = d.Format;
    pArrayDescriptor->NumChannels = d.NumChannels;
    pArrayDescriptor->Flags = d.Flags;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                        const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                        unsigned int numMipmapLevels)
{
    if (!numMipmapLevels)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return array_create((void **)pHandle, pMipmappedArrayDesc, numMipmapLevels, O_MIPMAP);
}

SIM_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    return array_destroy(hMipmappedArray, O_MIPMAP);
}
