/* The end-to-end workload: allocate N MiB on device 0 through the driver API, print "ready",
 * hold the memory until stdin closes, then free it and exit.
 *
 *   workload <MiB>
 */
#include <cuda.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: workload MiB\n");
        return 2;
    }
    size_t bytes = (size_t)strtoull(argv[1], NULL, 10) << 20;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr ptr;
    CUresult rc = cuInit(0);
    if (rc == CUDA_SUCCESS)
        rc = cuDeviceGet(&dev, 0);
    if (rc == CUDA_SUCCESS)
        rc = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (rc == CUDA_SUCCESS)
        rc = cuCtxSetCurrent(ctx);
    if (rc == CUDA_SUCCESS)
        rc = cuMemAlloc(&ptr, bytes);
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "workload: CUDA error %d\n", (int)rc);
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    while (getchar() != EOF)
        ;
    cuMemFree(ptr);
    return 0;
}
