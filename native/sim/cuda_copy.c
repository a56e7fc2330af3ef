/* The simulated CUDA driver (libcuda.so.1).  Copies: every 1-D, peer, array,
 * 2-D and 3-D form, each described as one transfer (cuda_transfer.c runs it). */
#include "cuda_transfer.h"

#define HP(p) ((unsigned long long)(uintptr_t)(p))

static CUresult copy1d(unsigned long long dst, int dt, struct sim_array *da, unsigned long long src,
                       int st, struct sim_array *sa, unsigned long long n, CUstream s, int mode)
{
    if (!INITED())
        return CUDA_ERROR_NOT_INITIALIZED;
    /* Array sides get pitch 0: the array as linear bytes from the offset. */
    struct xfer x = {.dst = {dt, dst, da, dt == S_ARRAY ? 0 : n, 1},
                     .src = {st, src, sa, st == S_ARRAY ? 0 : n, 1}, .w = n, .h = 1, .d = 1};
    return xfer_issue(&x, s, mode);
}

/* ---- 1-D copies ---- */

SIM_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{ return copy1d(dst, S_ANY, NULL, src, S_ANY, NULL, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{ return copy1d(dst, S_ANY, NULL, src, S_ANY, NULL, ByteCount, CU_STREAM_PER_THREAD, T_SYNC); }
SIM_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{ return copy1d(dst, S_ANY, NULL, src, S_ANY, NULL, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{ return copy1d(dst, S_ANY, NULL, src, S_ANY, NULL, ByteCount, hStream, T_ASYNC); }

/* Peer copies: the contexts must be live; the addresses say the rest. */
static CUresult peer_check(CUcontext a, CUcontext b)
{
    if (!INITED())
        return CUDA_ERROR_NOT_INITIALIZED;
    LOCK();
    struct sim_ctx *x = obj_get(a, O_CTX), *y = obj_get(b, O_CTX);
    int ok = x && y && atomic_load(&x->alive) && atomic_load(&y->alive);
    UNLOCK();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

SIM_API CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                              CUcontext srcContext, size_t ByteCount)
{
    CUresult rc = peer_check(dstContext, srcContext);
    return rc ? rc : copy1d(dstDevice, S_DEV, NULL, srcDevice, S_DEV, NULL, ByteCount, NULL, T_SYNC);
}
SIM_API CUresult cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                   CUcontext srcContext, size_t ByteCount)
{ return cuMemcpyPeer(dstDevice, dstContext, srcDevice, srcContext, ByteCount); }
SIM_API CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                   CUcontext srcContext, size_t ByteCount, CUstream hStream)
{
    CUresult rc = peer_check(dstContext, srcContext);
    return rc ? rc
              : copy1d(dstDevice, S_DEV, NULL, srcDevice, S_DEV, NULL, ByteCount, hStream, T_ASYNC);
}
SIM_API CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext,
                                        CUdeviceptr srcDevice, CUcontext srcContext,
                                        size_t ByteCount, CUstream hStream)
{ return cuMemcpyPeerAsync(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream); }

#define H2D(d, s, n, st, m) copy1d((d), S_DEV, NULL, HP(s), S_HOST, NULL, (n), (st), (m))
#define D2H(d, s, n, st, m) copy1d(HP(d), S_HOST, NULL, (s), S_DEV, NULL, (n), (st), (m))
#define D2D(d, s, n, st, m) copy1d((d), S_DEV, NULL, (s), S_DEV, NULL, (n), (st), (m))
#define H2A(a, o, s, n, st, m) copy1d((o), S_ARRAY, (struct sim_array *)(a), HP(s), S_HOST, NULL, (n), (st), (m))
#define A2H(d, a, o, n, st, m) copy1d(HP(d), S_HOST, NULL, (o), S_ARRAY, (struct sim_array *)(a), (n), (st), (m))
#define D2A(a, o, s, n) copy1d((o), S_ARRAY, (struct sim_array *)(a), (s), S_DEV, NULL, (n), NULL, T_SYNC)
#define A2D(d, a, o, n) copy1d((d), S_DEV, NULL, (o), S_ARRAY, (struct sim_array *)(a), (n), NULL, T_SYNC)
#define A2A(a, o, b, p, n) copy1d((o), S_ARRAY, (struct sim_array *)(a), (p), S_ARRAY, (struct sim_array *)(b), (n), NULL, T_SYNC)

SIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{ return H2D(dstDevice, srcHost, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{ return H2D(dstDevice, srcHost, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount)
{ return H2D(dstDevice, srcHost, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{ return D2H(dstHost, srcDevice, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{ return D2H(dstHost, srcDevice, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount)
{ return D2H(dstHost, srcDevice, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{ return D2D(dstDevice, srcDevice, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{ return D2D(dstDevice, srcDevice, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice, unsigned int ByteCount)
{ return D2D(dstDevice, srcDevice, ByteCount, NULL, T_SYNC); }

SIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                      CUstream hStream)
{ return H2D(dstDevice, srcHost, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                           size_t ByteCount, CUstream hStream)
{ return H2D(dstDevice, srcHost, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void *srcHost,
                                   unsigned int ByteCount, CUstream hStream)
{ return H2D(dstDevice, srcHost, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{ return D2H(dstHost, srcDevice, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                           CUstream hStream)
{ return D2H(dstHost, srcDevice, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount,
                                   CUstream hStream)
{ return D2H(dstHost, srcDevice, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{ return D2D(dstDevice, srcDevice, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                           size_t ByteCount, CUstream hStream)
{ return D2D(dstDevice, srcDevice, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyDtoDAsync(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                                   unsigned int ByteCount, CUstream hStream)
{ return D2D(dstDevice, srcDevice, ByteCount, hStream, T_ASYNC); }

/* ---- Arrays (offsets in bytes from the array's start) ---- */

SIM_API CUresult cuMemcpyHtoA_v2(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount)
{ return H2A(dstArray, dstOffset, srcHost, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyHtoA_v2_ptds(CUarray dstArray, size_t dstOffset, const void *srcHost,
                                      size_t ByteCount)
{ return H2A(dstArray, dstOffset, srcHost, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyHtoA(CUarray dstArray, unsigned int dstOffset, const void *srcHost,
                              unsigned int ByteCount)
{ return H2A(dstArray, dstOffset, srcHost, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyAtoH_v2(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount)
{ return A2H(dstHost, srcArray, srcOffset, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyAtoH_v2_ptds(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount)
{ return A2H(dstHost, srcArray, srcOffset, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyAtoH(void *dstHost, CUarray srcArray, unsigned int srcOffset,
                              unsigned int ByteCount)
{ return A2H(dstHost, srcArray, srcOffset, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyHtoAAsync_v2(CUarray dstArray, size_t dstOffset, const void *srcHost,
                                      size_t ByteCount, CUstream hStream)
{ return H2A(dstArray, dstOffset, srcHost, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray dstArray, size_t dstOffset, const void *srcHost,
                                           size_t ByteCount, CUstream hStream)
{ return H2A(dstArray, dstOffset, srcHost, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyHtoAAsync(CUarray dstArray, unsigned int dstOffset, const void *srcHost,
                                   unsigned int ByteCount, CUstream hStream)
{ return H2A(dstArray, dstOffset, srcHost, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyAtoHAsync_v2(void *dstHost, CUarray srcArray, size_t srcOffset,
                                      size_t ByteCount, CUstream hStream)
{ return A2H(dstHost, srcArray, srcOffset, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyAtoHAsync_v2_ptsz(void *dstHost, CUarray srcArray, size_t srcOffset,
                                           size_t ByteCount, CUstream hStream)
{ return A2H(dstHost, srcArray, srcOffset, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyAtoHAsync(void *dstHost, CUarray srcArray, unsigned int srcOffset,
                                   unsigned int ByteCount, CUstream hStream)
{ return A2H(dstHost, srcArray, srcOffset, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyDtoA_v2(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount)
{ return D2A(dstArray, dstOffset, srcDevice, ByteCount); }
SIM_API CUresult cuMemcpyDtoA_v2_ptds(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice,
                                      size_t ByteCount)
{ return D2A(dstArray, dstOffset, srcDevice, ByteCount); }
SIM_API CUresult cuMemcpyDtoA(CUarray dstArray, unsigned int dstOffset, CUdeviceptr_v1 srcDevice,
                              unsigned int ByteCount)
{ return D2A(dstArray, dstOffset, srcDevice, ByteCount); }
SIM_API CUresult cuMemcpyAtoD_v2(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount)
{ return A2D(dstDevice, srcArray, srcOffset, ByteCount); }
SIM_API CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset,
                                      size_t ByteCount)
{ return A2D(dstDevice, srcArray, srcOffset, ByteCount); }
SIM_API CUresult cuMemcpyAtoD(CUdeviceptr_v1 dstDevice, CUarray srcArray, unsigned int srcOffset,
                              unsigned int ByteCount)
{ return A2D(dstDevice, srcArray, srcOffset, ByteCount); }
SIM_API CUresult cuMemcpyAtoA_v2(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset,
                                 size_t ByteCount)
{ return A2A(dstArray, dstOffset, srcArray, srcOffset, ByteCount); }
SIM_API CUresult cuMemcpyAtoA_v2_ptds(CUarray dstArray, size_t dstOffset, CUarray srcArray,
                                      size_t srcOffset, size_t ByteCount)
{ return A2A(dstArray, dstOffset, srcArray, srcOffset, ByteCount); }
SIM_API CUresult cuMemcpyAtoA(CUarray dstArray, unsigned int dstOffset, CUarray srcArray,
                              unsigned int srcOffset, unsigned int ByteCount)
{ return A2A(dstArray, dstOffset, srcArray, srcOffset, ByteCount); }

/* ---- 2-D and 3-D copies ---- */

static CUresult make_side(struct side *s, CUmemorytype t, const void *host, CUdeviceptr dev,
                          CUarray arr, unsigned long long pitch, unsigned long long height,
                          unsigned long long x, unsigned long long y, unsigned long long z)
{
    switch (t) {
    case CU_MEMORYTYPE_HOST: *s = (struct side){S_HOST, HP(host), NULL, pitch, height, 0}; break;
    case CU_MEMORYTYPE_DEVICE: *s = (struct side){S_DEV, dev, NULL, pitch, height, 0}; break;
    case CU_MEMORYTYPE_UNIFIED: *s = (struct side){S_ANY, dev, NULL, pitch, height, 0}; break;
    case CU_MEMORYTYPE_ARRAY: {
        struct sim_array *a = obj_get(arr, O_ARRAY);
        if (!a)
            return CUDA_ERROR_INVALID_VALUE;
        unsigned long long rows, slices, row = array_row(a, &rows, &slices);
        if (x >= row || y >= rows || z >= slices)
            return CUDA_ERROR_INVALID_VALUE;
        *s = (struct side){S_ARRAY, z * row * rows + y * row + x, a, row, rows, 0};
        return CUDA_SUCCESS;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    s->addr += z * pitch * height + y * pitch + x;
    return CUDA_SUCCESS;
}

static CUresult copy3d(const CUDA_MEMCPY3D_PEER *p, CUstream s, int mode)
{
    if (!INITED())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->srcLOD || p->dstLOD)
        return CUDA_ERROR_INVALID_VALUE;
    struct xfer x = {.w = p->WidthInBytes, .h = p->Height ? p->Height : 1,
                     .d = p->Depth ? p->Depth : 1};
    LOCK();
    CUresult rc = make_side(&x.dst, p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray,
                            p->dstPitch, p->dstHeight, p->dstXInBytes, p->dstY, p->dstZ);
    if (!rc)
        rc = make_side(&x.src, p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray,
                       p->srcPitch, p->srcHeight, p->srcXInBytes, p->srcY, p->srcZ);
    UNLOCK();
    if (rc)
        return rc;
    /* A pitch of 0 is allowed for a single row (and a single slice). */
    if (x.dst.type != S_ARRAY && !x.dst.pitch && x.h == 1)
        x.dst.pitch = x.w;
    if (x.src.type != S_ARRAY && !x.src.pitch && x.h == 1)
        x.src.pitch = x.w;
    if (x.dst.type != S_ARRAY && !x.dst.height && x.d == 1)
        x.dst.height = x.h;
    if (x.src.type != S_ARRAY && !x.src.height && x.d == 1)
        x.src.height = x.h;
    /* The driver caps pitches of linear memory (CU_DEVICE_ATTRIBUTE_MAX_PITCH). */
    if (x.dst.pitch > (1ULL << 31) || x.src.pitch > (1ULL << 31))
        return CUDA_ERROR_INVALID_VALUE;
    return xfer_issue(&x, s, mode);
}

static CUresult copy_from3d(const CUDA_MEMCPY3D *c, CUstream s, int mode)
{
    if (!c)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    if (c->reserved0 || c->reserved1)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUDA_MEMCPY3D_PEER p = {
        .srcXInBytes = c->srcXInBytes, .srcY = c->srcY, .srcZ = c->srcZ, .srcLOD = c->srcLOD,
        .srcMemoryType = c->srcMemoryType, .srcHost = c->srcHost, .srcDevice = c->srcDevice,
        .srcArray = c->srcArray, .srcPitch = c->srcPitch, .srcHeight = c->srcHeight,
        .dstXInBytes = c->dstXInBytes, .dstY = c->dstY, .dstZ = c->dstZ, .dstLOD = c->dstLOD,
        .dstMemoryType = c->dstMemoryType, .dstHost = c->dstHost, .dstDevice = c->dstDevice,
        .dstArray = c->dstArray, .dstPitch = c->dstPitch, .dstHeight = c->dstHeight,
        .WidthInBytes = c->WidthInBytes, .Height = c->Height, .Depth = c->Depth};
    return copy3d(&p, s, mode);
}

static CUresult copy_from3d_v1(const CUDA_MEMCPY3D_v1 *c, CUstream s, int mode)
{
    if (!c)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUDA_MEMCPY3D p = {
        .srcXInBytes = c->srcXInBytes, .srcY = c->srcY, .srcZ = c->srcZ, .srcLOD = c->srcLOD,
        .srcMemoryType = c->srcMemoryType, .srcHost = c->srcHost, .srcDevice = c->srcDevice,
        .srcArray = c->srcArray, .reserved0 = c->reserved0, .srcPitch = c->srcPitch,
        .srcHeight = c->srcHeight, .dstXInBytes = c->dstXInBytes, .dstY = c->dstY,
        .dstZ = c->dstZ, .dstLOD = c->dstLOD, .dstMemoryType = c->dstMemoryType,
        .dstHost = c->dstHost, .dstDevice = c->dstDevice, .dstArray = c->dstArray,
        .reserved1 = c->reserved1, .dstPitch = c->dstPitch, .dstHeight = c->dstHeight,
        .WidthInBytes = c->WidthInBytes, .Height = c->Height, .Depth = c->Depth};
    return copy_from3d(&p, s, mode);
}

static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream s, int mode)
{
    if (!c)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUDA_MEMCPY3D_PEER p = {
        .srcXInBytes = c->srcXInBytes, .srcY = c->srcY, .srcMemoryType = c->srcMemoryType,
        .srcHost = c->srcHost, .srcDevice = c->srcDevice, .srcArray = c->srcArray,
        .srcPitch = c->srcPitch, .srcHeight = c->srcY + c->Height,
        .dstXInBytes = c->dstXInBytes, .dstY = c->dstY, .dstMemoryType = c->dstMemoryType,
        .dstHost = c->dstHost, .dstDevice = c->dstDevice, .dstArray = c->dstArray,
        .dstPitch = c->dstPitch, .dstHeight = c->dstY + c->Height,
        .WidthInBytes = c->WidthInBytes, .Height = c->Height, .Depth = 1};
    if (!c->Height)
        return INITED() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
    /* The driver's rule for 2-D copies: pitches at least the width. */
    if ((c->srcMemoryType != CU_MEMORYTYPE_ARRAY && c->srcPitch < c->WidthInBytes && c->Height > 1) ||
        (c->dstMemoryType != CU_MEMORYTYPE_ARRAY && c->dstPitch < c->WidthInBytes && c->Height > 1))
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return copy3d(&p, s, mode);
}

static CUresult copy2d_v1(const CUDA_MEMCPY2D_v1 *c, CUstream s, int mode)
{
    if (!c)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUDA_MEMCPY2D p = {
        .srcXInBytes = c->srcXInBytes, .srcY = c->srcY, .srcMemoryType = c->srcMemoryType,
        .srcHost = c->srcHost, .srcDevice = c->srcDevice, .srcArray = c->srcArray,
        .srcPitch = c->srcPitch, .dstXInBytes = c->dstXInBytes, .dstY = c->dstY,
        .dstMemoryType = c->dstMemoryType, .dstHost = c->dstHost, .dstDevice = c->dstDevice,
        .dstArray = c->dstArray, .dstPitch = c->dstPitch, .WidthInBytes = c->WidthInBytes,
        .Height = c->Height};
    return copy2d(&p, s, mode);
}

SIM_API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy) { return copy2d(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy) { return copy2d(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy2D(const CUDA_MEMCPY2D_v1 *pCopy) { return copy2d_v1(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy) { return copy2d(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{ return copy2d(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy2DUnaligned(const CUDA_MEMCPY2D_v1 *pCopy)
{ return copy2d_v1(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{ return copy2d(pCopy, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{ return copy2d(pCopy, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D_v1 *pCopy, CUstream hStream)
{ return copy2d_v1(pCopy, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *pCopy) { return copy_from3d(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *pCopy)
{ return copy_from3d(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy3D(const CUDA_MEMCPY3D_v1 *pCopy) { return copy_from3d_v1(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{ return copy_from3d(pCopy, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{ return copy_from3d(pCopy, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpy3DAsync(const CUDA_MEMCPY3D_v1 *pCopy, CUstream hStream)
{ return copy_from3d_v1(pCopy, hStream, T_ASYNC); }

static CUresult copy3d_peer(const CUDA_MEMCPY3D_PEER *p, CUstream s, int mode)
{
    if (!p)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = peer_check(p->dstContext, p->srcContext);
    return rc ? rc : copy3d(p, s, mode);
}

SIM_API CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *pCopy) { return copy3d_peer(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *pCopy)
{ return copy3d_peer(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream)
{ return copy3d_peer(pCopy, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream)
{ return copy3d_peer(pCopy, hStream, T_ASYNC); }
