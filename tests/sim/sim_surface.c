/* The simulator's second test probe: what clients beyond cgpu use (legacy
 * context attach/detach, IPC handles, stream and event queries, the default
 * stream-ordered pool, unmodelled entry points).  One command per run
 * (argv[1]), driven by tests/sim/test_sim_surface.py. */
#define _GNU_SOURCE
#define CUDA_ENABLE_DEPRECATED 1 /* cuCtxAttach/cuCtxDetach */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe_check.h"

#define MiB (1ull << 20)

static size_t free_mem(void)
{
    size_t f, t;
    OK(cuMemGetInfo(&f, &t));
    return f;
}

static CUcontext primary(void)
{
    CUcontext c;
    OK(cuDevicePrimaryCtxRetain(&c, 0));
    OK(cuCtxSetCurrent(c));
    return c;
}

static int cmd_attach(void)
{
    OK(cuInit(0));
    CUcontext c, got, cur;
    RC(cuCtxAttach(&got, 0), CUDA_ERROR_INVALID_CONTEXT);      /* nothing current */
    OK(cuCtxCreate(&c, NULL, 0, 0));                           /* usage count 1 */
    size_t f0 = free_mem();
    RC(cuCtxAttach(&got, 1), CUDA_ERROR_INVALID_VALUE);
    OK(cuCtxAttach(&got, 0));                                  /* 2 */
    CHECK(got == c);
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 10 * MiB));
    OK(cuCtxDetach(c));                                        /* 1: still alive and current */
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == c && free_mem() == f0 - 10 * MiB);
    OK(cuCtxDetach(c));                                        /* 0: destroyed and popped */
    OK(cuCtxGetCurrent(&cur));
    CHECK(cur == NULL);
    RC(cuCtxDetach(c), CUDA_ERROR_INVALID_CONTEXT);
    CUcontext prim = primary();
    CHECK(free_mem() == f0);                                   /* its memory went with it */
    RC(cuCtxAttach(&got, 0), CUDA_ERROR_INVALID_CONTEXT);      /* primaries use retain/release */
    RC(cuCtxDetach(prim), CUDA_ERROR_INVALID_CONTEXT);
    printf("ok\n");
    return 0;
}

static int cmd_ipc(void)
{
    OK(cuInit(0));
    primary();
    size_t f0 = free_mem();
    CUdeviceptr p, q;
    OK(cuMemAlloc(&p, 3 * MiB));
    CUipcMemHandle h, bad;
    OK(cuIpcGetMemHandle(&h, p));
    RC(cuIpcGetMemHandle(&bad, p + 512), CUDA_ERROR_INVALID_VALUE);   /* not an allocation */
    RC(cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
       CUDA_ERROR_INVALID_CONTEXT);                                   /* not in the exporter */
    CUevent ev, plain;
    OK(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    OK(cuEventCreate(&plain, CU_EVENT_DEFAULT));
    CUipcEventHandle eh;
    RC(cuIpcGetEventHandle(&eh, plain), CUDA_ERROR_INVALID_VALUE);     /* needs INTERPROCESS */
    OK(cuIpcGetEventHandle(&eh, ev));
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        OK(cuInit(0));
        primary();
        size_t c0 = free_mem();
        OK(cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
        CUdeviceptr base;
        size_t size;
        OK(cuMemGetAddressRange(&base, &size, q + 100));
        CHECK(base == q && size == 3 * MiB);
        OK(cuMemsetD8(q, 0, 3 * MiB));
        CHECK(free_mem() == c0);                                      /* the exporter's memory */
        RC(cuMemFree(q), CUDA_ERROR_INVALID_VALUE);                   /* closed, not freed */
        OK(cuIpcCloseMemHandle(q));
        RC(cuIpcCloseMemHandle(q), CUDA_ERROR_INVALID_VALUE);
        memset(&bad, 0, sizeof bad);
        RC(cuIpcOpenMemHandle(&q, bad, 0), CUDA_ERROR_INVALID_VALUE);
        CUevent ev2;
        OK(cuIpcOpenEventHandle(&ev2, eh));
        OK(cuStreamWaitEvent(NULL, ev2, 0));
        OK(cuEventQuery(ev2));
        printf("child %zu\n", c0);
        fflush(stdout);
        _exit(0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(free_mem() == f0 - 4 * MiB);
    OK(cuMemFree(p));
    printf("parent %zu\n", free_mem());
    return 0;
}

static void host_fn(void *data) { ++*(int *)data; }

static void callback(CUstream s, CUresult status, void *data)
{
    (void)s;
    *(int *)data += status == CUDA_SUCCESS ? 10 : 1000;
}

static int cmd_queries(void)
{
    OK(cuInit(0));
    CUcontext ctx = primary();
    CUstream s, s2;
    OK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -3));
    OK(cuStreamCreate(&s2, CU_STREAM_DEFAULT));
    unsigned int flags;
    int prio;
    unsigned long long id1, id2;
    CUcontext sc;
    CUdevice dev = -1;
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    OK(cuStreamGetFlags(s, &flags));
    CHECK(flags == CU_STREAM_NON_BLOCKING);
    OK(cuStreamGetPriority(s, &prio));
    CHECK(prio == -3);
    OK(cuStreamGetId(s, &id1));
    OK(cuStreamGetId(s2, &id2));
    CHECK(id1 != id2);
    OK(cuStreamGetCtx(s, &sc));
    CHECK(sc == ctx);
    OK(cuStreamGetDevice(s, &dev));
    CHECK(dev == 0);
    OK(cuStreamIsCapturing(s, &cs));
    CHECK(cs == CU_STREAM_CAPTURE_STATUS_NONE);
    OK(cuStreamIsCapturing(CU_STREAM_PER_THREAD, &cs));
    int calls = 0;
    OK(cuLaunchHostFunc(s, host_fn, &calls));
    OK(cuStreamAddCallback(s2, callback, &calls, 0));
    CHECK(calls == 11);
    OK(cuStreamDestroy(s2));
    RC(cuStreamGetFlags(s2, &flags), CUDA_ERROR_INVALID_HANDLE);

    CUevent a, b, untimed;
    OK(cuEventCreate(&a, CU_EVENT_DEFAULT));
    OK(cuEventCreate(&b, CU_EVENT_DEFAULT));
    OK(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING));
    OK(cuEventRecord(a, s));
    OK(cuEventRecordWithFlags(b, s, CU_EVENT_RECORD_DEFAULT));
    float ms = -1;
    OK(cuEventElapsedTime(&ms, a, b));
    CHECK(ms >= 0.0f && ms < 100.0f);   /* an idle stream: the time between the two calls */
    RC(cuEventElapsedTime(&ms, a, untimed), CUDA_ERROR_INVALID_HANDLE);
    printf("ok\n");
    return 0;
}

/* The default pool as cuda.core's DeviceMemoryResource drives it. */
static int cmd_pool(void)
{
    OK(cuInit(0));
    primary();
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUmemoryPool pool, cur;
    OK(cuDeviceGetDefaultMemPool(&pool, 0));
    OK(cuDeviceGetMemPool(&cur, 0));
    CHECK(pool == cur);
    cuuint64_t v = UINT64_MAX, got = 0;
    OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v));
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &got));
    CHECK(got == UINT64_MAX);
    size_t f0 = free_mem();
    CUdeviceptr p;
    OK(cuMemAllocFromPoolAsync(&p, 5 * MiB, pool, s));
    CHECK(free_mem() == f0 - 6 * MiB);
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &got));
    CHECK(got == 6 * MiB);
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &got));
    CHECK(got == 6 * MiB);
    CUmemoryPool owner = NULL;
    OK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
    CHECK(owner == pool);
    OK(cuMemFreeAsync(p, s));
    OK(cuStreamSynchronize(s));
    CHECK(free_mem() == f0 - 6 * MiB); /* the threshold is the maximum: the pool keeps it */
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &got));
    CHECK(got == 6 * MiB);
    OK(cuMemPoolTrimTo(pool, 0));
    CHECK(free_mem() == f0);
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &got));
    CHECK(got == 0);
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &got));
    CHECK(got == 6 * MiB);
    v = 0;
    OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v));
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &got));
    CHECK(got == 0);

    CUmemLocation self = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    CUmemLocation peer = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1};
    CUmemAccess_flags fl = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    OK(cuMemPoolGetAccess(&fl, pool, &self));
    CHECK(fl == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    OK(cuMemPoolGetAccess(&fl, pool, &peer));
    CHECK(fl == CU_MEM_ACCESS_FLAGS_PROT_NONE);
    CUmemAccessDesc desc = {.location = peer, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    OK(cuMemPoolSetAccess(pool, &desc, 1));
    OK(cuMemPoolGetAccess(&fl, pool, &peer));
    CHECK(fl == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    desc.location = self;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    RC(cuMemPoolSetAccess(pool, &desc, 1), CUDA_ERROR_INVALID_DEVICE);  /* its own device */
    printf("ok\n");
    return 0;
}

/* A sample of entry points the simulator does not model. */
static int cmd_unmodelled(void)
{
    CUgraphNode n;
    CUtexref t;
    RC(cuGraphAddEmptyNode(&n, NULL, NULL, 0), CUDA_ERROR_NOT_INITIALIZED);
    OK(cuInit(0));
    primary();
    RC(cuGraphAddEmptyNode(&n, NULL, NULL, 0), CUDA_ERROR_NOT_SUPPORTED);
    RC(cuTexRefCreate(&t), CUDA_ERROR_NOT_SUPPORTED);
    RC(cuCtxResetPersistingL2Cache(), CUDA_ERROR_NOT_SUPPORTED);
    const char *name = NULL;
    OK(cuGetErrorName(CUDA_ERROR_NOT_SUPPORTED, &name));
    printf("%s\n", name);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    const char *c = argv[1];
    if (!strcmp(c, "attach")) return cmd_attach();
    if (!strcmp(c, "ipc")) return cmd_ipc();
    if (!strcmp(c, "queries")) return cmd_queries();
    if (!strcmp(c, "pool")) return cmd_pool();
    if (!strcmp(c, "unmodelled")) return cmd_unmodelled();
    return 2;
}
