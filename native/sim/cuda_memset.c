/* The simulated CUDA driver (libcuda.so.1).  Sets (cuMemsetD*): fills of
 * device memory, each one transfer (cuda_transfer.c runs it). */
#include "cuda_transfer.h"

/* ---- Sets ---- */

static CUresult set2d(CUdeviceptr dst, unsigned long long pitch, unsigned val, unsigned esize,
                      unsigned long long width, unsigned long long height, CUstream s, int mode)
{
    if (!INITED())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (width > (1ULL << 48) || height > (1ULL << 48))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long w = width * esize;
    if (dst % esize || (height > 1 && (pitch < w || pitch % esize)))
        return CUDA_ERROR_INVALID_VALUE;
    struct xfer x = {.dst = {S_ANY, dst, NULL, height > 1 ? pitch : w, height},
                     .w = w, .h = height, .d = 1, .set = 1, .esize = esize, .val = val};
    return xfer_issue(&x, s, mode);
}

#define SET1(d, v, e, n, s, m) set2d((d), 0, (v), (e), (n), 1, (s), (m))

SIM_API CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{ return SET1(dstDevice, uc, 1, N, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{ return SET1(dstDevice, uc, 1, N, CU_STREAM_PER_THREAD, T_ASYNC); }
SIM_API CUresult cuMemsetD8(CUdeviceptr_v1 dstDevice, unsigned char uc, unsigned int N)
{ return SET1(dstDevice, uc, 1, N, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{ return SET1(dstDevice, us, 2, N, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N)
{ return SET1(dstDevice, us, 2, N, CU_STREAM_PER_THREAD, T_ASYNC); }
SIM_API CUresult cuMemsetD16(CUdeviceptr_v1 dstDevice, unsigned short us, unsigned int N)
{ return SET1(dstDevice, us, 2, N, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{ return SET1(dstDevice, ui, 4, N, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{ return SET1(dstDevice, ui, 4, N, CU_STREAM_PER_THREAD, T_ASYNC); }
SIM_API CUresult cuMemsetD32(CUdeviceptr_v1 dstDevice, unsigned int ui, unsigned int N)
{ return SET1(dstDevice, ui, 4, N, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{ return SET1(dstDevice, uc, 1, N, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                      CUstream hStream)
{ return SET1(dstDevice, uc, 1, N, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{ return SET1(dstDevice, us, 2, N, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                       CUstream hStream)
{ return SET1(dstDevice, us, 2, N, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{ return SET1(dstDevice, ui, 4, N, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                       CUstream hStream)
{ return SET1(dstDevice, ui, 4, N, hStream, T_ASYNC); }

SIM_API CUresult cuMemsetD2D8_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                 size_t Width, size_t Height)
{ return set2d(dstDevice, dstPitch, uc, 1, Width, Height, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                      size_t Width, size_t Height)
{ return set2d(dstDevice, dstPitch, uc, 1, Width, Height, CU_STREAM_PER_THREAD, T_ASYNC); }
SIM_API CUresult cuMemsetD2D8(CUdeviceptr_v1 dstDevice, unsigned int dstPitch, unsigned char uc,
                              unsigned int Width, unsigned int Height)
{ return set2d(dstDevice, dstPitch, uc, 1, Width, Height, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD2D16_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                  size_t Width, size_t Height)
{ return set2d(dstDevice, dstPitch, us, 2, Width, Height, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                       size_t Width, size_t Height)
{ return set2d(dstDevice, dstPitch, us, 2, Width, Height, CU_STREAM_PER_THREAD, T_ASYNC); }
SIM_API CUresult cuMemsetD2D16(CUdeviceptr_v1 dstDevice, unsigned int dstPitch, unsigned short us,
                               unsigned int Width, unsigned int Height)
{ return set2d(dstDevice, dstPitch, us, 2, Width, Height, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD2D32_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                  size_t Width, size_t Height)
{ return set2d(dstDevice, dstPitch, ui, 4, Width, Height, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                       size_t Width, size_t Height)
{ return set2d(dstDevice, dstPitch, ui, 4, Width, Height, CU_STREAM_PER_THREAD, T_ASYNC); }
SIM_API CUresult cuMemsetD2D32(CUdeviceptr_v1 dstDevice, unsigned int dstPitch, unsigned int ui,
                               unsigned int Width, unsigned int Height)
{ return set2d(dstDevice, dstPitch, ui, 4, Width, Height, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                   size_t Width, size_t Height, CUstream hStream)
{ return set2d(dstDevice, dstPitch, uc, 1, Width, Height, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                        size_t Width, size_t Height, CUstream hStream)
{ return set2d(dstDevice, dstPitch, uc, 1, Width, Height, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD2D16Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                    size_t Width, size_t Height, CUstream hStream)
{ return set2d(dstDevice, dstPitch, us, 2, Width, Height, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                         size_t Width, size_t Height, CUstream hStream)
{ return set2d(dstDevice, dstPitch, us, 2, Width, Height, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                    size_t Width, size_t Height, CUstream hStream)
{ return set2d(dstDevice, dstPitch, ui, 4, Width, Height, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                         size_t Width, size_t Height, CUstream hStream)
{ return set2d(dstDevice, dstPitch, ui, 4, Width, Height, hStream, T_ASYNC); }
