/* Memory in two live contexts, each credited with its own context's death.  The primary
 * context P (retained twice) and a context of our own C: A in P, B in C, then E in P while C
 * still lives, a release of P that leaves it alive, F in P, C destroyed, P released for good.
 * Prints the free memory cuMemGetInfo reports through the current context after each step:
 *   "<step> <rc> <free>" for step in start, alloc, release1, alloc2, destroy, release2 (read
 *   through P retained once more: a new primary context). */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

static void show(const char *step, CUresult rc)
{
    size_t free_ = 0, total = 0;
    cuMemGetInfo_v2(&free_, &total);
    printf("%s %d %zu\n", step, (int)rc, free_);
}

int main(int argc, char **argv)
{
    size_t mib = 1u << 20, unit = argc > 1 ? strtoull(argv[1], NULL, 0) : mib;
    CUdevice dev;
    CUcontext primary, again, own;
    CUdeviceptr a, b, e, f;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&primary, dev) ||
        cuDevicePrimaryCtxRetain(&again, dev) || cuCtxSetCurrent(primary))
        return 3;
    show("start", CUDA_SUCCESS);
    CUresult rc = cuMemAlloc_v2(&a, 8 * unit);
    if (rc == CUDA_SUCCESS)
        rc = cuCtxCreate(&own, 0, dev); /* current now */
    if (rc == CUDA_SUCCESS)
        rc = cuMemAlloc_v2(&b, 4 * unit);
    if (rc == CUDA_SUCCESS)
        rc = cuCtxSetCurrent(primary);
    if (rc == CUDA_SUCCESS)
        rc = cuMemAlloc_v2(&e, 2 * unit);
    show("alloc", rc);
    show("release1", cuDevicePrimaryCtxRelease_v2(dev)); /* retained once more: it lives */
    show("alloc2", cuMemAlloc_v2(&f, unit));
    show("destroy", cuCtxDestroy_v2(own)); /* B goes; P is still current */
    rc = cuDevicePrimaryCtxRelease_v2(dev); /* A, E and F go with P */
    if (rc == CUDA_SUCCESS)
        rc = cuDevicePrimaryCtxRetain(&primary, dev);
    if (rc == CUDA_SUCCESS)
        rc = cuCtxSetCurrent(primary);
    show("release2", rc);
    return 0;
}
