/* The simulated CUDA driver (libcuda.so.1). CUDA arrays and mipmapped arrays,
 * charged by their size. */
#include "cuda_sim.h"

#include <sys/mman.h>

/* ------------------------------------------------------------------------ */
/* Arrays                                                                    */

/* Bytes of one w x h x d level; 0 for an invalid format/channel count. */
static unsigned long long level_bytes(CUarray_format f, unsigned ch, unsigned long long w,
                                      unsigned long long h, unsigned long long d)
{
    unsigned long long elem = 0, block = 0;
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: elem = 1; break;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: elem = 2; break;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: elem = 4; break;
    case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X1: ch = 1; elem = 1; break;
    case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X2: ch = 1; elem = 2; break;
    case CU_AD_FORMAT_UNORM_INT8X4: case CU_AD_FORMAT_SNORM_INT8X4: ch = 1; elem = 4; break;
    case CU_AD_FORMAT_UNORM_INT16X1: case CU_AD_FORMAT_SNORM_INT16X1: ch = 1; elem = 2; break;
    case CU_AD_FORMAT_UNORM_INT16X2: case CU_AD_FORMAT_SNORM_INT16X2: ch = 1; elem = 4; break;
    case CU_AD_FORMAT_UNORM_INT16X4: case CU_AD_FORMAT_SNORM_INT16X4: ch = 1; elem = 8; break;
    case CU_AD_FORMAT_UNORM_INT_101010_2: ch = 1; elem = 4; break;
    case CU_AD_FORMAT_BC1_UNORM: case CU_AD_FORMAT_BC1_UNORM_SRGB:
    case CU_AD_FORMAT_BC4_UNORM: case CU_AD_FORMAT_BC4_SNORM: block = 8; break;
    case CU_AD_FORMAT_BC2_UNORM: case CU_AD_FORMAT_BC2_UNORM_SRGB:
    case CU_AD_FORMAT_BC3_UNORM: case CU_AD_FORMAT_BC3_UNORM_SRGB:
    case CU_AD_FORMAT_BC5_UNORM: case CU_AD_FORMAT_BC5_SNORM:
    case CU_AD_FORMAT_BC6H_UF16: case CU_AD_FORMAT_BC6H_SF16:
    case CU_AD_FORMAT_BC7_UNORM: case CU_AD_FORMAT_BC7_UNORM_SRGB: block = 16; break;
    case CU_AD_FORMAT_NV12: case CU_AD_FORMAT_NV16: case CU_AD_FORMAT_YUY2:
    case CU_AD_FORMAT_Y444_PLANAR8: case CU_AD_FORMAT_YUV444_8bit_SemiPlanar:
    case CU_AD_FORMAT_AYUV: ch = 1; elem = 4; break;
    case CU_AD_FORMAT_P010: case CU_AD_FORMAT_P016: case CU_AD_FORMAT_P210:
    case CU_AD_FORMAT_P216: case CU_AD_FORMAT_Y210: case CU_AD_FORMAT_Y216:
    case CU_AD_FORMAT_Y410: case CU_AD_FORMAT_Y416: case CU_AD_FORMAT_Y444_PLANAR10:
    case CU_AD_FORMAT_YUV444_16bit_SemiPlanar: ch = 1; elem = 8; break;
    default: return 0;
    }
    if (block) {
        return ((w + 3) / 4) * ((h + 3) / 4) * d * block;
    }
    if (ch != 1 && ch != 2 && ch != 4)
        return 0;
    if (w > (1ULL << 20) || h > (1ULL << 20) || d > (1ULL << 20))
        return 0;
    return w * h * d * ch * elem;
}

static unsigned long long array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *a, unsigned levels)
{
    unsigned long long total = 0;
    int layered = (a->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
    for (unsigned l = 0; l < (levels ? levels : 1); l++) {
        unsigned long long w = a->Width >> l, h = a->Height >> l;
        unsigned long long d = layered ? a->Depth : a->Depth >> l;
        if (!w) w = 1;
        if (!h) h = 1;
        if (!d) d = 1;
        unsigned long long b = level_bytes(a->Format, a->NumChannels, w, h, d);
        if (!b)
            return 0;
        total += b;
        if (!(a->Width >> l) && !(a->Height >> l) && !(a->Depth >> l))
            break;
    }
    return total;
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
            a->row_bytes = level_bytes(desc->Format, desc->NumChannels, desc->Width, 1, 1);
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
