/* Legacy context teardown: a context of our own, memory in it, one cuCtxAttach,
 * then cuCtxDetach twice (the second destroys it).  Prints the free memory that
 * cuMemGetInfo reports (through the primary context) after each step:
 *   "<step> <rc> <free>" for step in alloc, attach, detach1, detach2. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

static CUcontext primary;

static void show(const char *step, CUresult rc)
{
    size_t free_ = 0, total = 0;
    CUcontext cur;
    cuCtxGetCurrent(&cur);
    cuCtxSetCurrent(primary);
    cuMemGetInfo_v2(&free_, &total);
    cuCtxSetCurrent(cur);
    printf("%s %d %zu\n", step, (int)rc, free_);
}

int main(int argc, char **argv)
{
    size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (64u << 20);
    CUdevice dev;
    CUcontext ctx, attached;
    CUdeviceptr p;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&primary, dev))
        return 3;
    show("start", CUDA_SUCCESS);
    CUresult rc = cuCtxCreate(&ctx, 0, dev);
    if (rc == CUDA_SUCCESS)
        rc = cuMemAlloc_v2(&p, bytes);
    show("alloc", rc);
    show("attach", cuCtxAttach(&attached, 0));
    show("detach1", cuCtxDetach(ctx));
    show("detach2", cuCtxDetach(ctx));
    return 0;
}
