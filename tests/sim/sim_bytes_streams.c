/* Sets, and work in stream order (sim_bytes "memset", "order" and
 * "threads"): every cuMemsetD* form, synchronous, 2-D and async, writes its
 * pattern and no more; async copies and sets queued behind kernels land in
 * stream order, with pinned destinations filled only once the stream is
 * observed and pageable ones when the call returns; and six threads copying
 * and setting on their own streams keep their own bytes. */
#include "sim_bytes.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- sets ---- */

int cmd_memset(void)
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

/* ---- stream order ---- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int cmd_order(void)
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

int cmd_threads(void)
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
