/* A saturating compute workload on the simulator: launch `cgpu_sim_busy` kernels of <kernel_ns>
 * back to back on device 0, print "ready" after the first launch, and keep launching until stdin
 * closes (a reader thread watches it).
 *
 *   compute_workload <kernel_ns>
 */
#include <cuda.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static atomic_int stop;

static void *watch_stdin(void *arg)
{
    (void)arg;
    while (getchar() != EOF)
        ;
    atomic_store(&stop, 1);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: compute_workload kernel_ns\n");
        return 2;
    }
    unsigned long long ns = strtoull(argv[1], NULL, 10);
    void *params[] = {&ns};
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction busy;
    CUresult rc = cuInit(0);
    if (rc == CUDA_SUCCESS)
        rc = cuDeviceGet(&dev, 0);
    if (rc == CUDA_SUCCESS)
        rc = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (rc == CUDA_SUCCESS)
        rc = cuCtxSetCurrent(ctx);
    if (rc == CUDA_SUCCESS)
        rc = cuModuleLoadData(&mod, "any image");
    if (rc == CUDA_SUCCESS)
        rc = cuModuleGetFunction(&busy, mod, "cgpu_sim_busy");
    if (rc == CUDA_SUCCESS)
        rc = cuLaunchKernel(busy, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "compute_workload: CUDA error %d\n", (int)rc);
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    pthread_t reader;
    pthread_create(&reader, NULL, watch_stdin, NULL);
    while (!atomic_load(&stop)) {
        rc = cuLaunchKernel(busy, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
        if (rc != CUDA_SUCCESS) {
            fprintf(stderr, "compute_workload: launch error %d\n", (int)rc);
            return 1;
        }
    }
    pthread_join(reader, NULL);
    cuCtxSynchronize();
    return 0;
}
