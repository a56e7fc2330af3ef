/* Every copy family moves real bytes (sim_bytes "copies" and "pitched"):
 * the 1-D forms synchronous, _ptds, async, _ptsz and on the NULL stream, the
 * unified cuMemcpy, peer copies, the legacy 32-bit entry points and arrays;
 * then 2-D (pitched, unaligned, async), 3-D (device boxes at offsets, peer,
 * async, 3-D arrays) and the legacy v1 2-D structure, each read back and
 * compared, with the ranges and pitches the driver refuses. */
#include "sim_bytes.h"

#include <stdint.h>
#include <string.h>

/* ---- every copy family ---- */

/* The legacy (32-bit) forms, which cuda.h hides from programs. */
typedef unsigned int dptr_v1;
struct memcpy2d_v1 {
    unsigned int srcXInBytes, srcY;
    CUmemorytype srcMemoryType;
    const void *srcHost;
    dptr_v1 srcDevice;
    CUarray srcArray;
    unsigned int srcPitch;
    unsigned int dstXInBytes, dstY;
    CUmemorytype dstMemoryType;
    void *dstHost;
    dptr_v1 dstDevice;
    CUarray dstArray;
    unsigned int dstPitch;
    unsigned int WidthInBytes, Height;
};

typedef CUresult (*htod_t)(CUdeviceptr, const void *, size_t);
typedef CUresult (*dtoh_t)(void *, CUdeviceptr, size_t);
typedef CUresult (*dtod_t)(CUdeviceptr, CUdeviceptr, size_t);
typedef CUresult (*htoda_t)(CUdeviceptr, const void *, size_t, CUstream);
typedef CUresult (*dtoha_t)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*dtoda_t)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
typedef CUresult (*cpy_t)(CUdeviceptr, CUdeviceptr, size_t);
typedef CUresult (*cpya_t)(CUdeviceptr, CUdeviceptr, size_t, CUstream);

#define N 65536

/* host -> a -> b -> host through one synchronous family. */
static void round_trip_sync(const char *h2d, const char *d2d, const char *d2h, CUdeviceptr a,
                            CUdeviceptr b, unsigned seed)
{
    static unsigned char in[N], out[N];
    fill(in, N, seed);
    memset(out, 0, N);
    OK(((htod_t)sym(h2d))(a, in, N));
    OK(((dtod_t)sym(d2d))(b, a, N));
    OK(((dtoh_t)sym(d2h))(out, b, N));
    CHECK(!memcmp(in, out, N));
}

static void round_trip_async(const char *h2d, const char *d2d, const char *d2h, CUdeviceptr a,
                             CUdeviceptr b, CUstream s, unsigned seed)
{
    static unsigned char in[N], out[N];
    fill(in, N, seed);
    memset(out, 0, N);
    OK(((htoda_t)sym(h2d))(a, in, N, s));
    OK(((dtoda_t)sym(d2d))(b, a, N, s));
    OK(((dtoha_t)sym(d2h))(out, b, N, s));
    OK(cuStreamSynchronize(s));
    CHECK(!memcmp(in, out, N));
}

int cmd_copies(void)
{
    setup();
    CUdeviceptr a, b;
    CUstream s;
    OK(cuMemAlloc(&a, N));
    OK(cuMemAlloc(&b, N));
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    round_trip_sync("cuMemcpyHtoD_v2", "cuMemcpyDtoD_v2", "cuMemcpyDtoH_v2", a, b, 1);
    round_trip_sync("cuMemcpyHtoD_v2_ptds", "cuMemcpyDtoD_v2_ptds", "cuMemcpyDtoH_v2_ptds", a, b, 2);
    round_trip_async("cuMemcpyHtoDAsync_v2", "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoHAsync_v2", a, b,
                     s, 3);
    round_trip_async("cuMemcpyHtoDAsync_v2_ptsz", "cuMemcpyDtoDAsync_v2_ptsz",
                     "cuMemcpyDtoHAsync_v2_ptsz", a, b, CU_STREAM_PER_THREAD, 4);
    round_trip_async("cuMemcpyHtoDAsync_v2", "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoHAsync_v2", a, b,
                     NULL, 5);

    /* Unified cuMemcpy / cuMemcpyAsync in every direction. */
    static unsigned char in[N], out[N];
    const char *names[] = {"cuMemcpy", "cuMemcpy_ptds"};
    for (int k = 0; k < 2; k++) {
        fill(in, N, 10 + k);
        memset(out, 0, N);
        cpy_t f = (cpy_t)sym(names[k]);
        OK(f(a, (CUdeviceptr)(uintptr_t)in, N));
        OK(f(b, a, N));
        OK(f((CUdeviceptr)(uintptr_t)out, b, N));
        CHECK(!memcmp(in, out, N));
    }
    const char *anames[] = {"cuMemcpyAsync", "cuMemcpyAsync_ptsz"};
    for (int k = 0; k < 2; k++) {
        fill(in, N, 20 + k);
        memset(out, 0, N);
        cpya_t f = (cpya_t)sym(anames[k]);
        OK(f(a, (CUdeviceptr)(uintptr_t)in, N, s));
        OK(f(b, a, N, s));
        OK(f((CUdeviceptr)(uintptr_t)out, b, N, s));
        OK(cuStreamSynchronize(s));
        CHECK(!memcmp(in, out, N));
    }

    /* Peer copies (one device: both contexts the same). */
    CUcontext ctx;
    OK(cuCtxGetCurrent(&ctx));
    fill(in, N, 30);
    OK(cuMemcpyHtoD(a, in, N));
    OK(cuMemcpyPeer(b, ctx, a, ctx, N));
    memset(out, 0, N);
    OK(cuMemcpyDtoH(out, b, N));
    CHECK(!memcmp(in, out, N));
    OK(cuMemsetD8(b, 0, N));
    OK(cuMemcpyPeerAsync(b, ctx, a, ctx, N, s));
    OK(cuStreamSynchronize(s));
    memset(out, 0, N);
    OK(cuMemcpyDtoH(out, b, N));
    CHECK(!memcmp(in, out, N));
    RC(cuMemcpyPeer(b, NULL, a, ctx, N), CUDA_ERROR_INVALID_CONTEXT);

    /* Legacy 32-bit entry points: below 4 GiB, bytes too. */
    dptr_v1 v1;
    CUresult (*alloc1)(dptr_v1 *, unsigned) = sym("cuMemAlloc");
    CUresult (*htod1)(dptr_v1, const void *, unsigned) = sym("cuMemcpyHtoD");
    CUresult (*dtoh1)(void *, dptr_v1, unsigned) = sym("cuMemcpyDtoH");
    OK(alloc1(&v1, N));
    fill(in, N, 40);
    memset(out, 0, N);
    OK(htod1(v1, in, N));
    OK(dtoh1(out, v1, N));
    CHECK(!memcmp(in, out, N));

    /* Arrays: 1-D offsets in bytes, every direction. */
    CUarray arr, arr2;
    CUDA_ARRAY_DESCRIPTOR ad = {.Width = 1024, .Height = 16, .Format = CU_AD_FORMAT_UNSIGNED_INT32,
                                .NumChannels = 1}; /* 4 KiB rows, 64 KiB */
    OK(cuArrayCreate(&arr, &ad));
    OK(cuArrayCreate(&arr2, &ad));
    fill(in, N, 50);
    OK(cuMemcpyHtoA(arr, 0, in, N));
    memset(out, 0, N);
    OK(cuMemcpyAtoH(out, arr, 0, N));
    CHECK(!memcmp(in, out, N));
    OK(cuMemcpyAtoA(arr2, 100, arr, 0, N - 100));
    OK(cuMemcpyAtoD(a, arr2, 100, N - 100));
    memset(out, 0, N);
    OK(cuMemcpyDtoH(out, a, N - 100));
    CHECK(!memcmp(in, out, N - 100));
    OK(cuMemcpyDtoA(arr, 8, a, 64));
    OK(cuMemcpyAtoH(out, arr, 8, 64));
    CHECK(!memcmp(in, out, 64));
    fill(in, N, 51);
    OK(cuMemcpyHtoAAsync(arr, 0, in, N, s));
    memset(out, 0, N);
    OK(cuMemcpyAtoHAsync(out, arr, 0, N, s));
    OK(cuStreamSynchronize(s));
    CHECK(!memcmp(in, out, N));
    RC(cuMemcpyHtoA(arr, N - 4, in, 8), CUDA_ERROR_INVALID_VALUE);
    OK(cuArrayDestroy(arr2));
    RC(cuMemcpyAtoH(out, arr2, 0, 4), CUDA_ERROR_INVALID_VALUE);
    puts("ok");
    return 0;
}

/* ---- 2-D and 3-D ---- */

int cmd_pitched(void)
{
    setup();
    enum { W = 300, H = 40, D = 5 };
    CUdeviceptr p;
    size_t pitch;
    OK(cuMemAllocPitch(&p, &pitch, W, H * D, 4));
    CHECK(pitch >= W && pitch % 512 == 0);
    static unsigned char host[W * H * D], back[W * H * D], dev[512 * H * D];

    /* 2-D: a host rectangle into pitched memory, read back row by row. */
    fill(host, sizeof host, 60);
    CUDA_MEMCPY2D c = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = host, .srcPitch = W,
                       .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = p, .dstPitch = pitch,
                       .WidthInBytes = W, .Height = H};
    OK(cuMemcpy2D(&c));
    OK(cuMemcpyDtoH(dev, p, pitch * H));
    for (int y = 0; y < H; y++)
        CHECK(!memcmp(dev + y * pitch, host + y * W, W));
    /* back through the other direction, with offsets */
    memset(back, 0, sizeof back);
    CUDA_MEMCPY2D r = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = p, .srcPitch = pitch,
                       .srcXInBytes = 10, .srcY = 3, .dstMemoryType = CU_MEMORYTYPE_HOST,
                       .dstHost = back, .dstPitch = W, .WidthInBytes = W - 10, .Height = H - 3};
    OK(cuMemcpy2DUnaligned(&r));
    for (int y = 0; y < H - 3; y++)
        CHECK(!memcmp(back + y * W, host + (y + 3) * W + 10, W - 10));
    /* 2-D async on a stream, device to device then to host */
    CUstream s;
    OK(cuStreamCreate(&s, 0));
    CUdeviceptr q;
    size_t qpitch;
    OK(cuMemAllocPitch(&q, &qpitch, W, H, 4));
    CUDA_MEMCPY2D dd = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = p, .srcPitch = pitch,
                        .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = q, .dstPitch = qpitch,
                        .WidthInBytes = W, .Height = H};
    OK(cuMemcpy2DAsync(&dd, s));
    CUDA_MEMCPY2D dh = {.srcMemoryType = CU_MEMORYTYPE_UNIFIED, .srcDevice = q, .srcPitch = qpitch,
                        .dstMemoryType = CU_MEMORYTYPE_UNIFIED,
                        .dstDevice = (CUdeviceptr)(uintptr_t)back, .dstPitch = W,
                        .WidthInBytes = W, .Height = H};
    memset(back, 0, sizeof back);
    OK(cuMemcpy2DAsync(&dh, s));
    OK(cuStreamSynchronize(s));
    CHECK(!memcmp(back, host, W * H));
    /* pitch below the width: refused */
    c.dstPitch = W - 1;
    RC(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
    /* past the end of the allocation: refused */
    c.dstPitch = pitch;
    c.Height = (2 << 20) / pitch + 1; /* past the 2 MiB the allocation takes */
    c.srcHost = calloc(c.Height, W);
    RC(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);
    free((void *)c.srcHost);

    /* 3-D: a host box (W x H x D) into pitched device slices, with an
     * offset destination (x 7, y 2, z 1), then the whole device box back. */
    enum { BW = 100, BH = 10, BD = 3 };
    static unsigned char box[BW * BH * BD];
    fill(box, sizeof box, 61);
    OK(cuMemsetD8(p, 0, pitch * H * D));
    CUDA_MEMCPY3D t = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = box, .srcPitch = BW,
                       .srcHeight = BH, .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = p,
                       .dstPitch = pitch, .dstHeight = H, .dstXInBytes = 7, .dstY = 2, .dstZ = 1,
                       .WidthInBytes = BW, .Height = BH, .Depth = BD};
    OK(cuMemcpy3D(&t));
    OK(cuMemcpyDtoH(dev, p, pitch * H * D));
    for (int z = 0; z < BD; z++)
        for (int y = 0; y < BH; y++)
            CHECK(!memcmp(dev + (z + 1) * pitch * H + (y + 2) * pitch + 7, box + (z * BH + y) * BW,
                          BW));
    CHECK(dev[pitch * H + 2 * pitch + 6] == 0 && dev[pitch * H + 2 * pitch + 7 + BW] == 0);
    /* and back, async, through cuMemcpy3DAsync and cuMemcpy3DPeer */
    static unsigned char box2[BW * BH * BD];
    CUDA_MEMCPY3D u = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = p, .srcPitch = pitch,
                       .srcHeight = H, .srcXInBytes = 7, .srcY = 2, .srcZ = 1,
                       .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = box2, .dstPitch = BW,
                       .dstHeight = BH, .WidthInBytes = BW, .Height = BH, .Depth = BD};
    OK(cuMemcpy3DAsync(&u, s));
    OK(cuStreamSynchronize(s));
    CHECK(!memcmp(box, box2, sizeof box));
    CUcontext ctx;
    OK(cuCtxGetCurrent(&ctx));
    CUDA_MEMCPY3D_PEER pe = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = p,
                             .srcPitch = pitch, .srcHeight = H, .srcXInBytes = 7, .srcY = 2,
                             .srcZ = 1, .srcContext = ctx, .dstMemoryType = CU_MEMORYTYPE_HOST,
                             .dstHost = box2, .dstPitch = BW, .dstHeight = BH,
                             .dstContext = ctx, .WidthInBytes = BW, .Height = BH, .Depth = BD};
    memset(box2, 0, sizeof box2);
    OK(cuMemcpy3DPeer(&pe));
    CHECK(!memcmp(box, box2, sizeof box));
    memset(box2, 0, sizeof box2);
    OK(cuMemcpy3DPeerAsync(&pe, s));
    OK(cuStreamSynchronize(s));
    CHECK(!memcmp(box, box2, sizeof box));
    /* a 3-D array: host box in, box out */
    CUarray arr;
    CUDA_ARRAY3D_DESCRIPTOR a3 = {.Width = BW, .Height = BH, .Depth = BD,
                                  .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
    OK(cuArray3DCreate(&arr, &a3));
    CUDA_MEMCPY3D ta = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = box, .srcPitch = BW,
                        .srcHeight = BH, .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = arr,
                        .WidthInBytes = BW, .Height = BH, .Depth = BD};
    OK(cuMemcpy3D(&ta));
    CUDA_MEMCPY3D fa = {.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = arr,
                        .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = box2, .dstPitch = BW,
                        .dstHeight = BH, .WidthInBytes = BW, .Height = BH, .Depth = BD};
    memset(box2, 0, sizeof box2);
    OK(cuMemcpy3D(&fa));
    CHECK(!memcmp(box, box2, sizeof box));
    fa.Depth = BD + 1;
    RC(cuMemcpy3D(&fa), CUDA_ERROR_INVALID_VALUE);
    /* legacy v1 structure */
    struct memcpy2d_v1 c1 = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = host, .srcPitch = W,
                           .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = back, .dstPitch = W,
                           .WidthInBytes = W, .Height = H};
    memset(back, 0, sizeof back);
    OK(((CUresult(*)(const struct memcpy2d_v1 *))sym("cuMemcpy2D"))(&c1));
    CHECK(!memcmp(back, host, W * H));
    puts("ok");
    return 0;
}
