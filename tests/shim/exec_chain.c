/* A chain of images: each initialises CUDA, allocates SIZE bytes and execs the next.
 *   exec_chain N SIZE         N images in all; the last prints what cuMemGetInfo shows
 *                             used ("used <bytes>"), then "ready", and waits for stdin
 *   exec_chain plain SIZE     allocates SIZE, then execs `sh` with LD_PRELOAD removed
 *                             (an image without the shim), which prints "ready" and waits */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void start(unsigned long long size)
{
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuMemAlloc_v2(&p, (size_t)size)) {
        fprintf(stderr, "exec_chain: CUDA set-up or allocation failed\n");
        exit(3);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    unsigned long long size = strtoull(argv[2], NULL, 0);
    setvbuf(stdout, NULL, _IOLBF, 0);
    start(size);
    if (strcmp(argv[1], "plain") == 0) {
        unsetenv("LD_PRELOAD");
        execl("/bin/sh", "sh", "-c", "echo ready; cat >/dev/null", (char *)NULL);
        return 4;
    }
    long n = atol(argv[1]);
    if (n > 1) {
        char next[32];
        snprintf(next, sizeof next, "%ld", n - 1);
        execl("/proc/self/exe", argv[0], next, argv[2], (char *)NULL);
        return 4;
    }
    size_t free_b = 0, total = 0;
    if (cuMemGetInfo_v2(&free_b, &total))
        return 5;
    printf("used %zu\n", total - free_b);
    printf("ready\n");
    char buf[64];
    while (fread(buf, 1, sizeof buf, stdin) > 0)
        ;
    return 0;
}
