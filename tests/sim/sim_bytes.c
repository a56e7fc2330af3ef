/* The simulator's memory contents: one command per run (argv[1]), driven by
 * tests/sim/test_sim_bytes.py.  Every copy family moves real bytes, sets
 * write their patterns, VMM mappings of one handle share bytes, pinned host
 * memory and pointer attributes answer as the driver's do, and device memory
 * costs only the pages touched. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(expr) do { if (!(expr)) { \
    fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #expr); exit(1); } } while (0)
#define OK(call) do { CUresult rc_ = (call); if (rc_ != CUDA_SUCCESS) { \
    fprintf(stderr, "FAIL %s:%d: %s -> %d\n", __FILE__, __LINE__, #call, (int)rc_); \
    exit(1); } } while (0)
#define RC(call, want) do { CUresult rc_ = (call); if (rc_ != (want)) { \
    fprintf(stderr, "FAIL %s:%d: %s -> %d, want %d\n", __FILE__, __LINE__, #call, (int)rc_, \
            (int)(want)); exit(1); } } while (0)

static void *lib;
static void *sym(const char *name) { void *p = dlsym(lib, name); CHECK(p); return p; }

static CUcontext setup(void)
{
    CUdevice d;
    CUcontext c;
    OK(cuInit(0));
    OK(cuDeviceGet(&d, 0));
    OK(cuDevicePrimaryCtxRetain(&c, d));
    OK(cuCtxSetCurrent(c));
    return c;
}

/* A deterministic pattern, different per seed. */
static void fill(unsigned char *p, size_t n, unsigned seed)
{
    unsigned x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (unsigned char)(x >> 16);
    }
}

static CUfunction busy_fn;

/* Queue `ms` milliseconds of kernel time on `s`. */
static void busy(CUstream s, unsigned long long ms)
{
    if (!busy_fn) {
        CUmodule m;
        OK(cuModuleLoadData(&m, "any image"));
        OK(cuModuleGetFunction(&busy_fn, m, "cgpu_sim_busy"));
    }
    unsigned long long ns = ms * 1000000ULL;
    void *params[] = {&ns};
    OK(cuLaunchKernel(busy_fn, 1, 1, 1, 32, 1, 1, 0, s, params, NULL));
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            v = atol(line + 6);
    if (f)
        fclose(f);
    return v;
}

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

static int cmd_copies(void)
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

static int cmd_pitched(void)
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

/* ---- sets ---- */

static int cmd_memset(void)
{
    setup();
    enum { B = 4096 };
    CUdeviceptr p;
    static unsigned char h[B];
    OK(cuMemAlloc(&p, B));
    CUstream s;
    OK(cuStreamCreate(&s, 0));

    OK(cuMemsetD8(p, 0xEE, B));
    OK(cuMemsetD8(p + 1, 0x5A, 3));
    OK(cuMemcpyDtoH(h, p, B));
    CHECK(h[0] == 0xEE && h[1] == 0x5A && h[3] == 0x5A && h[4] == 0xEE && h[B - 1] == 0xEE);

    OK(cuMemsetD16(p + 2, 0xBEEF, 5));
    OK(cuMemcpyDtoH(h, p, 16));
    CHECK(h[1] == 0x5A && h[2] == 0xEF && h[3] == 0xBE && h[10] == 0xEF && h[11] == 0xBE &&
          h[12] == 0xEE);
    RC(cuMemsetD16(p + 1, 1, 1), CUDA_ERROR_INVALID_VALUE); /* misaligned */

    OK(cuMemsetD32(p, 0x01020304, B / 4));
    OK(cuMemcpyDtoH(h, p, B));
    for (int i = 0; i < B; i += 4)
        CHECK(h[i] == 4 && h[i + 1] == 3 && h[i + 2] == 2 && h[i + 3] == 1);
    RC(cuMemsetD32(p + 2, 1, 1), CUDA_ERROR_INVALID_VALUE);

    /* 2-D: 3 rows of 8 elements, pitch 64 bytes */
    OK(cuMemsetD8(p, 0, B));
    OK(cuMemsetD2D8(p, 64, 0x11, 8, 3));
    OK(cuMemsetD2D16(p + 256, 64, 0x2222, 8, 3));
    OK(cuMemsetD2D32(p + 512, 64, 0x33333333, 8, 3));
    OK(cuMemcpyDtoH(h, p, B));
    for (int y = 0; y < 3; y++) {
        for (int x = 0; x < 64; x++) {
            CHECK(h[y * 64 + x] == (x < 8 ? 0x11 : 0));
            CHECK(h[256 + y * 64 + x] == (x < 16 ? 0x22 : 0));
            CHECK(h[512 + y * 64 + x] == (x < 32 ? 0x33 : 0));
        }
    }
    CHECK(h[3 * 64] == 0 && h[256 + 3 * 64] == 0);
    RC(cuMemsetD2D32(p, 16, 1, 8, 3), CUDA_ERROR_INVALID_VALUE); /* pitch below width */

    /* async forms, in order on one stream */
    OK(cuMemsetD8Async(p, 1, B, s));
    OK(cuMemsetD16Async(p, 0x0202, 8, s));
    OK(cuMemsetD32Async(p + 16, 0x03030303, 4, s));
    OK(cuMemsetD2D8Async(p + 1024, 32, 4, 4, 2, s));
    OK(cuMemsetD2D16Async(p + 2048, 32, 0x0505, 4, 2, s));
    OK(cuMemsetD2D32Async(p + 3072, 32, 0x06060606, 4, 2, s));
    OK(cuStreamSynchronize(s));
    OK(cuMemcpyDtoH(h, p, B));
    CHECK(h[0] == 2 && h[15] == 2 && h[16] == 3 && h[31] == 3 && h[32] == 1);
    CHECK(h[1024] == 4 && h[1027] == 4 && h[1028] == 1 && h[1056] == 4 && h[1088] == 1);
    CHECK(h[2048] == 5 && h[2055] == 5 && h[2056] == 1 && h[2080] == 5);
    CHECK(h[3072] == 6 && h[3087] == 6 && h[3088] == 1 && h[3104] == 6);
    /* out of range */
    RC(cuMemsetD8(p + B - 1, 0, (2 << 20)), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemsetD32Async(p, 0, (2 << 20), s), CUDA_ERROR_INVALID_VALUE);
    puts("ok");
    return 0;
}

/* ---- VMM ---- */

static int cmd_vmm(void)
{
    setup();
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
    size_t gran;
    OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemGenericAllocationHandle h1, h2;
    OK(cuMemCreate(&h1, gran, &prop, 0));
    OK(cuMemCreate(&h2, gran, &prop, 0));
    CUdeviceptr va, vb;
    OK(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
    OK(cuMemAddressReserve(&vb, gran, 0, 0, 0));
    /* h1 at va and at vb: one allocation, two addresses */
    OK(cuMemMap(va, gran, 0, h1, 0));
    OK(cuMemMap(vb, gran, 0, h1, 0));
    OK(cuMemMap(va + gran, gran, 0, h2, 0));
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    static unsigned char in[4096], out[4096];
    fill(in, sizeof in, 70);
    /* No device may touch a mapping before cuMemSetAccess. */
    RC(cuMemcpyHtoD(va + 100, in, sizeof in), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemSetAccess(va, 2 * gran, &acc, 1));
    CUmemAccessDesc ro = acc;
    ro.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    OK(cuMemSetAccess(vb, gran, &ro, 1));
    RC(cuMemsetD8(vb, 0, 16), CUDA_ERROR_INVALID_VALUE); /* read-only */
    OK(cuMemcpyDtoH(out, vb, 16));
    OK(cuMemSetAccess(vb, gran, &acc, 1));
    OK(cuMemcpyHtoD(va + 100, in, sizeof in));
    OK(cuMemcpyDtoH(out, vb + 100, sizeof out));
    CHECK(!memcmp(in, out, sizeof in));
    OK(cuMemsetD8(vb, 0x77, 16));
    OK(cuMemcpyDtoH(out, va, 16));
    CHECK(out[0] == 0x77 && out[15] == 0x77);
    /* a copy across the boundary of two handles mapped side by side */
    OK(cuMemcpyHtoD(va + gran - 2048, in, sizeof in));
    memset(out, 0, sizeof out);
    OK(cuMemcpyDtoH(out, va + gran - 2048, sizeof out));
    CHECK(!memcmp(in, out, sizeof in));
    /* pointer attributes of a mapping: the range is the reservation */
    CUdeviceptr start = 0;
    size_t size = 0;
    unsigned long long types = 0;
    OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + gran + 5));
    OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + gran + 5));
    OK(cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, va + 5));
    CHECK(start == va && size == 2 * gran && types == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, va + gran + 5));
    CHECK(size == gran);
    /* the handle survives one mapping going and its release */
    OK(cuMemUnmap(va, gran));
    OK(cuMemRelease(h1));
    memset(out, 0, sizeof out);
    OK(cuMemcpyDtoH(out, vb + 100, 64));
    CHECK(!memcmp(out, in, 64));
    RC(cuMemcpyDtoH(out, va, 16), CUDA_ERROR_INVALID_VALUE); /* unmapped now */
    /* a new handle mapped where h1 was starts from zero */
    CUmemGenericAllocationHandle h3;
    OK(cuMemCreate(&h3, gran, &prop, 0));
    OK(cuMemMap(va, gran, 0, h3, 0));
    RC(cuMemcpyDtoH(out, va, 16), CUDA_ERROR_INVALID_VALUE); /* a new mapping: no access yet */
    OK(cuMemSetAccess(va, gran, &acc, 1));
    OK(cuMemcpyDtoH(out, va, 16));
    for (int i = 0; i < 16; i++)
        CHECK(out[i] == 0);
    OK(cuMemUnmap(va, 2 * gran));
    OK(cuMemUnmap(vb, gran));
    OK(cuMemRelease(h2));
    OK(cuMemRelease(h3));
    OK(cuMemAddressFree(va, 2 * gran));
    OK(cuMemAddressFree(vb, gran));

    /* Thousands of handles mapped side by side, as PyTorch's expandable
     * segments grow, with few file descriptors to spare. */
    struct rlimit rl = {256, 256};
    CHECK(!setrlimit(RLIMIT_NOFILE, &rl));
    enum { MANY = 3000 };
    static CUmemGenericAllocationHandle hs[MANY];
    CUdeviceptr seg;
    OK(cuMemAddressReserve(&seg, MANY * gran, 0, 0, 0));
    for (int i = 0; i < MANY; i++) {
        OK(cuMemCreate(&hs[i], gran, &prop, 0));
        OK(cuMemMap(seg + i * gran, gran, 0, hs[i], 0));
        OK(cuMemRelease(hs[i])); /* the mapping keeps it */
    }
    OK(cuMemSetAccess(seg, MANY * gran, &acc, 1));
    OK(cuMemcpyHtoD(seg + 1234 * gran - 100, in, sizeof in));
    memset(out, 0, sizeof out);
    OK(cuMemcpyDtoH(out, seg + 1234 * gran - 100, sizeof out));
    CHECK(!memcmp(in, out, sizeof in));
    OK(cuMemUnmap(seg, MANY * gran));
    OK(cuMemAddressFree(seg, MANY * gran));
    puts("ok");
    return 0;
}

/* ---- lazy backing: RSS follows the pages touched ---- */

static int cmd_lazy(int argc, char **argv)
{
    setup();
    unsigned long long big = argc > 2 ? strtoull(argv[2], NULL, 0) : (60ULL << 30);
    unsigned long long touch = argc > 3 ? strtoull(argv[3], NULL, 0) : (64ULL << 20);
    long r0 = rss_kib();
    CUdeviceptr p;
    OK(cuMemAlloc(&p, big));
    long r1 = rss_kib();
    OK(cuMemsetD8(p + big / 2, 0xAB, touch));
    unsigned char b = 0;
    OK(cuMemcpyDtoH(&b, p + big / 2 + touch - 1, 1));
    CHECK(b == 0xAB);
    long r2 = rss_kib();
    OK(cuMemFree(p));
    long r3 = rss_kib();
    /* managed memory the host touches, then frees */
    CUdeviceptr m;
    OK(cuMemAllocManaged(&m, big, CU_MEM_ATTACH_GLOBAL));
    memset((void *)(uintptr_t)m, 1, touch);
    long r4 = rss_kib();
    OK(cuMemFree(m));
    long r5 = rss_kib();
    /* a VMM handle: its pages go when it is released and unmapped */
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gran;
    OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    unsigned long long vsize = (touch + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    OK(cuMemCreate(&h, vsize, &prop, 0));
    OK(cuMemAddressReserve(&va, vsize, 0, 0, 0));
    OK(cuMemMap(va, vsize, 0, h, 0));
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    OK(cuMemSetAccess(va, vsize, &acc, 1));
    OK(cuMemsetD8(va, 3, touch));
    long r6 = rss_kib();
    OK(cuMemUnmap(va, vsize));
    OK(cuMemRelease(h));
    long r7 = rss_kib();
    printf("{\"start\": %ld, \"allocated\": %ld, \"touched\": %ld, \"freed\": %ld, "
           "\"managed_touched\": %ld, \"managed_freed\": %ld, \"vmm_touched\": %ld, "
           "\"vmm_released\": %ld}\n", r0, r1, r2, r3, r4, r5, r6, r7);
    return 0;
}

/* ---- stream order ---- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmd_order(void)
{
    setup();
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 4096));
    OK(cuMemsetD8(p, 0x11, 4096));
    unsigned char *pinned;
    OK(cuMemAllocHost((void **)&pinned, 4096));
    memset(pinned, 0, 4096);

    /* Behind 400 ms of kernel time, a copy to pinned memory has not run
     * when the call returns (at once); it has after the stream is
     * synchronised.  (The timing checks allow a loaded machine 300 ms.) */
    double t0 = now_ms();
    busy(s, 400);
    OK(cuMemcpyDtoHAsync(pinned, p, 4096, s));
    CHECK(now_ms() - t0 < 300);            /* returned before the kernel ended */
    CHECK(pinned[0] == 0);                 /* not yet: nothing observed the stream */
    if (now_ms() - t0 < 300)
        RC(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    OK(cuStreamSynchronize(s));
    CHECK(pinned[0] == 0x11 && pinned[4095] == 0x11);

    /* A set then a copy queued behind a kernel run in that order. */
    busy(s, 100);
    OK(cuMemsetD8Async(p, 0x22, 4096, s));
    OK(cuMemcpyDtoHAsync(pinned, p, 4096, s));
    CUevent e;
    OK(cuEventCreate(&e, 0));
    OK(cuEventRecord(e, s));
    CHECK(pinned[0] == 0x11);
    OK(cuEventSynchronize(e));
    CHECK(pinned[0] == 0x22);

    /* To pageable memory the copy is done when the call returns (it waits). */
    static unsigned char pageable[4096];
    busy(s, 100);
    OK(cuMemsetD8Async(p, 0x33, 4096, s));
    OK(cuMemcpyDtoHAsync(pageable, p, 4096, s));
    CHECK(pageable[0] == 0x33);

    /* From pageable memory the bytes are taken when the call returns. */
    busy(s, 100);
    memset(pageable, 0x44, sizeof pageable);
    OK(cuMemcpyHtoDAsync(p, pageable, 4096, s));
    memset(pageable, 0x55, sizeof pageable);
    OK(cuStreamSynchronize(s));
    OK(cuMemcpyDtoH(pageable, p, 4096));
    CHECK(pageable[0] == 0x44 && pageable[4095] == 0x44);

    /* A stream query that finds the work done sees the bytes too. */
    busy(s, 50);
    OK(cuMemcpyDtoHAsync(pinned, p, 4096, s));
    while (cuStreamQuery(s) == CUDA_ERROR_NOT_READY)
        usleep(1000);
    CHECK(pinned[0] == 0x44);

    /* A synchronous copy waits for the context's work (legacy stream). */
    OK(cuMemsetD8(p, 0x66, 4096));
    busy(NULL, 100);
    OK(cuMemsetD8(p, 0x77, 4096)); /* queued behind the kernel */
    OK(cuMemcpyDtoH(pageable, p, 4096));
    CHECK(pageable[0] == 0x77);
    OK(cuMemFreeHost(pinned));
    puts("ok");
    return 0;
}

/* ---- pinned host memory and pointer attributes ---- */

static int cmd_host(void)
{
    CUcontext ctx = setup();
    void *h;
    unsigned flags = 0;
    OK(cuMemHostAlloc(&h, 10000, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_WRITECOMBINED));
    CHECK(((uintptr_t)h & 4095) == 0);
    OK(cuMemHostGetFlags(&flags, (char *)h + 5));
    CHECK(flags == (CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_WRITECOMBINED |
                    CU_MEMHOSTALLOC_DEVICEMAP));
    RC(cuMemHostAlloc(&h, 16, 0x80), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr dp;
    OK(cuMemHostGetDevicePointer(&dp, h, 0));
    CHECK(dp == (CUdeviceptr)(uintptr_t)h);
    RC(cuMemHostGetDevicePointer(&dp, h, 1), CUDA_ERROR_INVALID_VALUE);

    /* Copies with pinned memory, and with its device address. */
    CUdeviceptr d;
    OK(cuMemAlloc(&d, 10000));
    fill(h, 10000, 80);
    OK(cuMemcpyHtoD(d, h, 10000));
    void *h2;
    OK(cuMemAllocHost(&h2, 10000));
    OK(cuMemcpyDtoH(h2, d, 10000));
    CHECK(!memcmp(h, h2, 10000));
    memset(h2, 0, 10000);
    OK(cuMemcpyDtoD((CUdeviceptr)(uintptr_t)h2, d, 10000)); /* pinned memory is mapped */
    CHECK(!memcmp(h, h2, 10000));
    OK(cuMemsetD8((CUdeviceptr)(uintptr_t)h2, 9, 10)); /* and can be set */
    CHECK(((unsigned char *)h2)[9] == 9);

    /* Attributes: pinned host memory */
    unsigned mt = 0;
    void *hp = NULL;
    CUcontext pc = NULL;
    int ord = -1;
    unsigned long long id1 = 0, id2 = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    OK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h + 8));
    CHECK(mt == CU_MEMORYTYPE_HOST);
    OK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, (CUdeviceptr)(uintptr_t)h + 8));
    CHECK(hp == (char *)h + 8);
    OK(cuPointerGetAttribute(&pc, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)(uintptr_t)h));
    CHECK(pc == ctx);
    OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                             (CUdeviceptr)(uintptr_t)h + 8));
    OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)(uintptr_t)h + 8));
    CHECK(start == (CUdeviceptr)(uintptr_t)h && size == 10000);
    OK(cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)h));
    OK(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)h2));
    CHECK(id1 && id2 && id1 != id2);

    /* device memory */
    OK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 100));
    CHECK(mt == CU_MEMORYTYPE_DEVICE);
    RC(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d), CUDA_ERROR_INVALID_VALUE);
    OK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
    CHECK(ord == 0);
    OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 100));
    OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 100));
    CHECK(start == d && size == 10000);
    int ipc = 0;
    OK(cuPointerGetAttribute(&ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, d));
    CHECK(ipc == 1);
    RC(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + (4 << 20)),
       CUDA_ERROR_INVALID_VALUE);

    /* managed memory: the host reads and writes it at its address */
    CUdeviceptr m;
    OK(cuMemAllocManaged(&m, 8192, CU_MEM_ATTACH_GLOBAL));
    unsigned managed = 0;
    OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m));
    CHECK(managed == 1);
    OK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, m + 4));
    CHECK(hp == (void *)(uintptr_t)(m + 4));
    unsigned char *mp = (unsigned char *)(uintptr_t)m;
    memset(mp, 0x42, 8192);
    OK(cuMemsetD8(m + 10, 0x43, 1));
    CHECK(mp[10] == 0x43 && mp[11] == 0x42);
    OK(cuMemcpyDtoH(h2, m, 8192));
    CHECK(((unsigned char *)h2)[9] == 0x42 && ((unsigned char *)h2)[10] == 0x43);

    /* registered host memory */
    void *reg = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(reg != MAP_FAILED);
    RC(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)reg),
       CUDA_ERROR_INVALID_VALUE);
    OK(cuMemHostRegister(reg, 1 << 16, CU_MEMHOSTREGISTER_DEVICEMAP));
    RC(cuMemHostRegister((char *)reg + 4096, 4096, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    OK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                             (CUdeviceptr)(uintptr_t)reg + 100));
    CHECK(mt == CU_MEMORYTYPE_HOST);
    OK(cuMemHostGetDevicePointer(&dp, (char *)reg + 100, 0));
    CHECK(dp == (CUdeviceptr)(uintptr_t)reg + 100);
    RC(cuMemHostGetFlags(&flags, reg), CUDA_ERROR_INVALID_VALUE); /* not an allocation */
    RC(cuMemFreeHost(reg), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemHostUnregister((char *)reg + 8), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    OK(cuMemHostUnregister(reg));
    RC(cuMemHostUnregister(reg), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    RC(cuMemHostRegister(NULL, 4096, 0), CUDA_ERROR_INVALID_VALUE);
    munmap(reg, 1 << 16);
    RC(cuMemHostRegister(reg, 1 << 16, 0), CUDA_ERROR_INVALID_VALUE); /* no pages there */
    RC(cuMemHostRegister((void *)(uintptr_t)d, 4096, 0), CUDA_ERROR_INVALID_VALUE);

    /* unregistered host memory: cuPointerGetAttributes reads zeros */
    static char plain[64];
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT,
                                   CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                   CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                   CU_POINTER_ATTRIBUTE_IS_MANAGED};
    unsigned amt = 99, aman = 99;
    CUcontext actx = (CUcontext)1;
    CUdeviceptr adev = 1;
    void *ahost = (void *)1;
    void *data[] = {&amt, &actx, &adev, &ahost, &aman};
    OK(cuPointerGetAttributes(5, attrs, data, (CUdeviceptr)(uintptr_t)plain));
    CHECK(amt == 0 && actx == NULL && adev == 0 && ahost == NULL && aman == 0);
    RC(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)plain),
       CUDA_ERROR_INVALID_VALUE);
    /* ... and device memory fills what it has, NULL for the host pointer */
    ahost = (void *)1;
    OK(cuPointerGetAttributes(5, attrs, data, d));
    CHECK(amt == CU_MEMORYTYPE_DEVICE && actx == ctx && adev == d && ahost == NULL && aman == 0);
    OK(cuPointerGetAttributes(5, attrs, data, m));
    CHECK(amt == CU_MEMORYTYPE_DEVICE && ahost == (void *)(uintptr_t)m && aman == 1);
    CUpointer_attribute bad[] = {(CUpointer_attribute)999};
    RC(cuPointerGetAttributes(1, bad, data, d), CUDA_ERROR_INVALID_VALUE);

    OK(cuMemFreeHost(h));
    RC(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
    RC(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h),
       CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFreeHost(h2));
    puts("ok");
    return 0;
}

/* ---- errors, and device memory is no host memory ---- */

static int cmd_errors(void)
{
    setup();
    CUdeviceptr p, q;
    static unsigned char buf[8192];
    OK(cuMemAlloc(&p, 4096));
    OK(cuMemAlloc(&q, 4096));
    RC(cuMemcpyHtoD(0, buf, 16), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemcpyHtoD(0x42, buf, 16), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemcpyHtoD(p, NULL, 16), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemcpyDtoH(NULL, p, 16), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemcpyDtoH(buf, p + (2 << 20) - 8, 16), CUDA_ERROR_INVALID_VALUE); /* runs off the end */
    RC(cuMemcpyDtoD(q, p - 8, 16), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemcpy((CUdeviceptr)(uintptr_t)buf, p + (64 << 20), 16), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemsetD8(0x1000, 0, 16), CUDA_ERROR_INVALID_VALUE);           /* unknown, not pinned */
    RC(cuMemsetD8((CUdeviceptr)(uintptr_t)buf, 0, 16), CUDA_ERROR_INVALID_VALUE); /* pageable */
    RC(cuMemcpyHtoDAsync(p, buf, 16, (CUstream)buf), CUDA_ERROR_INVALID_HANDLE);
    OK(cuMemcpyHtoD(p, buf, 0)); /* nothing to copy */
    /* Unmapped host memory is an error, never a crash. */
    void *gone = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(gone != MAP_FAILED);
    munmap(gone, 8192);
    RC(cuMemcpyHtoD(p, gone, 16), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemcpyDtoH(gone, p, 16), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemcpyHtoDAsync(p, gone, 16, NULL), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemcpy((CUdeviceptr)(uintptr_t)buf, (CUdeviceptr)(uintptr_t)gone, 16),
       CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(p));
    RC(cuMemcpyHtoD(p, buf, 16), CUDA_ERROR_INVALID_VALUE);             /* freed */
    RC(cuMemcpyDtoH(buf, p, 16), CUDA_ERROR_INVALID_VALUE);
    /* A copy queued behind a kernel whose memory is freed first is dropped,
     * never run on the freed range. */
    CUstream s;
    OK(cuStreamCreate(&s, 0));
    busy(s, 50);
    OK(cuMemsetD8Async(q, 1, 4096, s));
    OK(cuMemFree(q));
    CUdeviceptr filler, q2;
    OK(cuMemAlloc(&filler, 4096)); /* takes p's old place */
    OK(cuMemAlloc(&q2, 4096));
    CHECK(q2 == q); /* the address is given out again, lowest first */
    CUstream idle;
    OK(cuStreamCreate(&idle, CU_STREAM_NON_BLOCKING));
    OK(cuMemsetD8Async(q2, 2, 4096, idle)); /* runs now, before the queued set's time */
    OK(cuStreamSynchronize(s));
    OK(cuMemcpyDtoH(buf, q2, 4096));
    CHECK(buf[0] == 2 && buf[4095] == 2); /* the old set did not land in the new memory */
    /* The host faults on device memory, as on a GPU. */
    CUdeviceptr r;
    OK(cuMemAlloc(&r, 4096));
    pid_t pid = fork();
    if (!pid) {
        volatile unsigned char *hp = (unsigned char *)(uintptr_t)r;
        (void)hp[0];
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    puts("ok");
    return 0;
}

/* ---- IPC: the importer sees the exporter's bytes ---- */

static int cmd_ipc(void)
{
    setup();
    enum { B = 1 << 20 };
    static unsigned char in[B], out[B];
    CUdeviceptr p;
    OK(cuMemAlloc(&p, B));
    fill(in, B, 90);
    OK(cuMemcpyHtoD(p, in, B));
    CUipcMemHandle h;
    OK(cuIpcGetMemHandle(&h, p));
    CUdeviceptr managed;
    OK(cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL));
    *(unsigned char *)(uintptr_t)managed = 7;
    fflush(stdout);
    int st;
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (!pid) {
        /* A forked child loses its parent's managed memory at once. */
        pid_t g = fork();
        if (!g) {
            volatile unsigned char *mp = (unsigned char *)(uintptr_t)managed;
            mp[0] = 1;
            _exit(0);
        }
        CHECK(waitpid(g, &st, 0) == g && WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
        setup(); /* a forked child starts over */
        CUdeviceptr q;
        OK(cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
        OK(cuMemcpyDtoH(out, q, B));
        CHECK(!memcmp(in, out, B));
        OK(cuMemsetD8(q + 10, 0xC3, 5));
        OK(cuIpcCloseMemHandle(q));
        _exit(0);
    }
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    OK(cuMemcpyDtoH(out, p, B));
    CHECK(out[9] == in[9] && out[10] == 0xC3 && out[14] == 0xC3 && out[15] == in[15]);
    CHECK(*(unsigned char *)(uintptr_t)managed == 7); /* untouched by the children */
    puts("ok");
    return 0;
}

/* ---- VMM shareable handles: another process maps the same bytes ---- */

static int cmd_vmmshare(void)
{
    setup();
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    size_t gran;
    OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemGenericAllocationHandle h, plain, back;
    OK(cuMemCreate(&h, 2 * gran, &prop, 0));
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
    OK(cuMemMap(va, 2 * gran, 0, h, 0));
    OK(cuMemSetAccess(va, 2 * gran, &acc, 1));
    static unsigned char in[8192], out[8192];
    fill(in, sizeof in, 95);
    OK(cuMemcpyHtoD(va + gran - 4096, in, sizeof in)); /* before the export */
    int fd = -1;
    RC(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0),
       CUDA_ERROR_NOT_SUPPORTED);
    OK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CHECK(fd >= 0);
    /* the mapping still shows the bytes, now from the shared file */
    OK(cuMemcpyDtoH(out, va + gran - 4096, sizeof out));
    CHECK(!memcmp(in, out, sizeof out));
    prop.requestedHandleTypes = 0;
    OK(cuMemCreate(&plain, gran, &prop, 0));
    int fd2;
    RC(cuMemExportToShareableHandle(&fd2, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
       CUDA_ERROR_INVALID_VALUE); /* not asked for at cuMemCreate */
    int other = memfd_create("not-cuda", 0);
    CHECK(other >= 0 && !ftruncate(other, 4 * gran));
    RC(cuMemImportFromShareableHandle(&back, (void *)(intptr_t)other,
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
       CUDA_ERROR_INVALID_VALUE); /* a file, but no memory this driver exported */
    close(other);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (!pid) {
        setup();
        CUmemGenericAllocationHandle imp;
        OK(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        close(fd);
        CUmemAllocationProp got;
        OK(cuMemGetAllocationPropertiesFromHandle(&got, imp));
        CHECK(got.location.id == 0 &&
              got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        CUdeviceptr vb;
        OK(cuMemAddressReserve(&vb, 2 * gran, 0, 0, 0));
        OK(cuMemMap(vb, 2 * gran, 0, imp, 0));
        OK(cuMemSetAccess(vb, 2 * gran, &acc, 1));
        OK(cuMemcpyDtoH(out, vb + gran - 4096, sizeof out));
        CHECK(!memcmp(in, out, sizeof out));
        OK(cuMemsetD8(vb, 0x5E, 4));
        OK(cuMemUnmap(vb, 2 * gran));
        OK(cuMemRelease(imp));
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    OK(cuMemcpyDtoH(out, va, 8));
    CHECK(out[0] == 0x5E && out[3] == 0x5E && out[4] == 0);
    close(fd);
    OK(cuMemUnmap(va, 2 * gran));
    OK(cuMemRelease(h));
    OK(cuMemRelease(plain));
    puts("ok");
    return 0;
}

/* ---- threads: copies from many threads keep their own bytes ---- */

static CUcontext thread_ctx;

static void *copier(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    OK(cuCtxSetCurrent(thread_ctx));
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    static _Thread_local unsigned char in[1 << 16], out[1 << 16];
    for (int i = 0; i < 200; i++) {
        size_t n = 1 + (seed * 7919u + (unsigned)i * 104729u) % sizeof in;
        CUdeviceptr p;
        OK(cuMemAlloc(&p, n));
        fill(in, n, seed * 1000 + (unsigned)i);
        if (i % 10 == 0)
            busy(s, 2); /* these copies wait in the queue */
        OK(cuMemcpyHtoDAsync(p, in, n, s));
        OK(cuMemsetD8Async(p, (unsigned char)i, n / 2, s));
        memset(out, 0, n);
        OK(cuMemcpyDtoHAsync(out, p, n, s));
        OK(cuStreamSynchronize(s));
        for (size_t k = 0; k < n; k++)
            CHECK(out[k] == (k < n / 2 ? (unsigned char)i : in[k]));
        OK(cuMemFree(p));
    }
    OK(cuStreamDestroy(s));
    return NULL;
}

static int cmd_threads(void)
{
    thread_ctx = setup();
    busy(NULL, 1); /* loads the kernel before the threads start */
    pthread_t t[6];
    for (unsigned i = 0; i < 6; i++)
        CHECK(!pthread_create(&t[i], NULL, copier, (void *)(uintptr_t)(i + 1)));
    for (int i = 0; i < 6; i++)
        CHECK(!pthread_join(t[i], NULL));
    puts("ok");
    return 0;
}

int main(int argc, char **argv)
{
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib);
    if (argc < 2)
        return 2;
    const char *c = argv[1];
    if (!strcmp(c, "copies")) return cmd_copies();
    if (!strcmp(c, "pitched")) return cmd_pitched();
    if (!strcmp(c, "memset")) return cmd_memset();
    if (!strcmp(c, "vmm")) return cmd_vmm();
    if (!strcmp(c, "lazy")) return cmd_lazy(argc, argv);
    if (!strcmp(c, "order")) return cmd_order();
    if (!strcmp(c, "host")) return cmd_host();
    if (!strcmp(c, "errors")) return cmd_errors();
    if (!strcmp(c, "ipc")) return cmd_ipc();
    if (!strcmp(c, "threads")) return cmd_threads();
    if (!strcmp(c, "vmmshare")) return cmd_vmmshare();
    return 2;
}
