/* The sizes of arrays, pitches, graph nodes and heaps, for the shim and the simulator alike
 * (cgpu_sizes.h). */
#include "cgpu_sizes.h"

uint64_t cgpu_pages(uint64_t bytes, uint64_t page)
{
    return (bytes + page - 1) / page * page;
}

uint64_t cgpu_pitch(uint64_t width)
{
    return cgpu_pages(width, CGPU_PITCH_ALIGN);
}

uint64_t cgpu_array_level_bytes(CUarray_format f, unsigned channels, uint64_t w, uint64_t h, uint64_t d,
                                int *known)
{
    uint64_t elem = 0, block = 0, ch = channels;
    *known = 1;
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
    default: /* packed and video formats of a later CUDA: charged generously */
        *known = 0;
        ch = ch ? ch : 1;
        elem = 16;
        break;
    }
    if (block)
        return ((w + 3) / 4) * ((h + 3) / 4) * d * block;
    if (*known && ch != 1 && ch != 2 && ch != 4)
        return 0;
    if (w > (1ULL << 20) || h > (1ULL << 20) || d > (1ULL << 20))
        return 0;
    return w * h * d * ch * elem;
}

uint64_t cgpu_array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *a, unsigned levels, int *known)
{
    uint64_t total = 0;
    int layered = (a->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
    *known = 1;
    for (unsigned l = 0; l < (levels ? levels : 1) && l < 64; l++) {
        uint64_t w = a->Width >> l, h = a->Height >> l, d = layered ? a->Depth : a->Depth >> l;
        uint64_t b = cgpu_array_level_bytes(a->Format, a->NumChannels, w ? w : 1, h ? h : 1, d ? d : 1, known);
        if (!b)
            return 0;
        total += b;
        if (!(a->Width >> l) && !(a->Height >> l) && !(a->Depth >> l))
            break;
    }
    return total;
}

uint64_t cgpu_heap_bytes(CUlimit limit, uint64_t value, uint64_t resident, uint64_t page)
{
    switch (limit) {
    case CU_LIMIT_STACK_SIZE:
        return cgpu_pages(cgpu_pages(value, 16) * resident, page);
    case CU_LIMIT_MALLOC_HEAP_SIZE:
    case CU_LIMIT_PRINTF_FIFO_SIZE:
        return cgpu_pages(value, page);
    default:
        return 0;
    }
}

uint64_t cgpu_heap_beyond_default(CUlimit limit, uint64_t value, uint64_t resident, uint64_t page)
{
    uint64_t dflt = limit == CU_LIMIT_STACK_SIZE         ? CGPU_STACK_DEFAULT
                    : limit == CU_LIMIT_MALLOC_HEAP_SIZE ? CGPU_MALLOC_HEAP_DEFAULT
                                                         : CGPU_PRINTF_FIFO_DEFAULT;
    uint64_t have = cgpu_heap_bytes(limit, value, resident, page), base = cgpu_heap_bytes(limit, dflt, resident, page);
    return have > base ? have - base : 0;
}
