/* Times the driver calls the shim wraps; run with and without LD_PRELOAD=libcgpu.so.
 *   shim_bench pairs N SIZE   -> ns per cuMemAlloc_v2+cuMemFree_v2 pair
 *   shim_bench meminfo N      -> ns per cuMemGetInfo_v2
 *   shim_bench cold N SIZE KIB -> ns per pair, each call after a write to every cache line of
 *                                a KIB KiB buffer (as PyTorch's path evicts the shim's lines
 *                                between two calls); the buffer's cost is in bare and shimmed
 *                                figures alike, so their difference is the shim's, cold
 * Both time N calls in batches of 1000 and report the fastest batch: on a shared machine
 * the median of whole runs mostly measures the neighbours.
 *   shim_bench init           -> us from process start to the first allocation done
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCH 1000

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void setup(void)
{
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
        fprintf(stderr, "shim_bench: CUDA set-up failed\n");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    if (strcmp(argv[1], "init") == 0) {
        double t0 = now_ns();
        setup();
        CUdeviceptr p;
        if (cuMemAlloc_v2(&p, 1 << 20) != CUDA_SUCCESS)
            return 1;
        double t1 = now_ns();
        cuMemFree_v2(p);
        printf("%.3f\n", (t1 - t0) / 1e3);
        return 0;
    }
    setup();
    long n = argc > 2 ? atol(argv[2]) : 100000;
    if (strcmp(argv[1], "pairs") == 0) {
        size_t size = argc > 3 ? (size_t)atoll(argv[3]) : (2u << 20);
        CUdeviceptr p;
        for (long i = 0; i < n / 10; i++) { /* warm-up */
            cuMemAlloc_v2(&p, size);
            cuMemFree_v2(p);
        }
        double best = 1e30;
        for (long done = 0; done < n; done += BATCH) {
            double t0 = now_ns();
            for (long i = 0; i < BATCH; i++)
                if (cuMemAlloc_v2(&p, size) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS)
                    return 1;
            double t = (now_ns() - t0) / BATCH;
            best = t < best ? t : best;
        }
        printf("%.2f\n", best);
    } else if (strcmp(argv[1], "cold") == 0) {
        size_t size = argc > 3 ? (size_t)atoll(argv[3]) : (2u << 20);
        size_t bytes = (argc > 4 ? (size_t)atoll(argv[4]) : 256) << 10;
        volatile unsigned char *buf = calloc(bytes, 1);
        if (!buf)
            return 1;
        CUdeviceptr p;
        double best = 1e30;
        for (long done = 0; done < n; done += BATCH / 10) {
            double t0 = now_ns();
            for (long i = 0; i < BATCH / 10; i++) {
                for (size_t b = 0; b < bytes; b += 64)
                    buf[b]++;
                if (cuMemAlloc_v2(&p, size) != CUDA_SUCCESS)
                    return 1;
                for (size_t b = 0; b < bytes; b += 64)
                    buf[b]++;
                if (cuMemFree_v2(p) != CUDA_SUCCESS)
                    return 1;
            }
            double t = (now_ns() - t0) / (BATCH / 10);
            best = t < best ? t : best;
        }
        printf("%.2f\n", best);
    } else if (strcmp(argv[1], "meminfo") == 0) {
        size_t f, t;
        double best = 1e30;
        for (long done = 0; done < n; done += BATCH) {
            double t0 = now_ns();
            for (long i = 0; i < BATCH; i++)
                cuMemGetInfo_v2(&f, &t);
            double b = (now_ns() - t0) / BATCH;
            best = b < best ? b : best;
        }
        printf("%.2f\n", best);
    } else {
        return 2;
    }
    return 0;
}
