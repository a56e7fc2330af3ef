/* The simulator's timeline probe: kernels of chosen durations, streams,
 * events, graphs, queue depth and launch cost.  One command per run
 * (argv[1]), driven by tests/sim/test_sim_timeline.py.  Times are
 * CLOCK_MONOTONIC nanoseconds, as the simulator's. */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "probe_check.h"

#define MS 1000000ULL

static unsigned long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

static void sleep_until(unsigned long long t)
{
    struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ULL), .tv_nsec = (long)(t % 1000000000ULL)};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

static CUfunction busy_fn, other_fn;

static void setup(int dev)
{
    OK(cuInit(0));
    CUcontext c;
    OK(cuDevicePrimaryCtxRetain(&c, dev));
    OK(cuCtxSetCurrent(c));
    CUmodule m;
    OK(cuModuleLoadData(&m, "any image"));
    OK(cuModuleGetFunction(&busy_fn, m, "cgpu_sim_busy"));
    OK(cuModuleGetFunction(&other_fn, m, "saxpy"));
}

static CUresult busy(CUstream s, unsigned long long ns)
{
    void *params[] = {&ns};
    return cuLaunchKernel(busy_fn, 1, 1, 1, 32, 1, 1, 0, s, params, NULL);
}

static unsigned long long host_ran_at;

static void host_fn(void *data)
{
    (void)data;
    host_ran_at = now_ns();
}

static int near(float ms, float want) { return ms > want - 0.5f && ms < want + 0.5f; }

/* Streams, events, synchronization and host functions in one process. */
static int cmd_semantics(void)
{
    setup(0);
    CUstream s1, s2;
    OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUevent ea, eb, ec;
    OK(cuEventCreate(&ea, 0));
    OK(cuEventCreate(&eb, 0));
    OK(cuEventCreate(&ec, 0));
    float ms = -1;
    RC(cuEventElapsedTime(&ms, ea, eb), CUDA_ERROR_INVALID_HANDLE);   /* not recorded */
    unsigned long long t0 = now_ns();
    OK(cuEventRecord(ea, s1));
    OK(busy(s1, 50 * MS));
    OK(cuEventRecord(eb, s1));
    OK(busy(s2, 30 * MS));              /* another stream, same device: after the first */
    OK(cuEventRecord(ec, s2));
    CHECK(now_ns() - t0 < 5 * MS);      /* launches do not wait */
    RC(cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
    RC(cuEventQuery(eb), CUDA_ERROR_NOT_READY);
    RC(cuEventElapsedTime(&ms, ea, eb), CUDA_ERROR_NOT_READY);
    OK(cuEventSynchronize(eb));
    unsigned long long t1 = now_ns() - t0;
    CHECK(t1 >= 50 * MS && t1 < 65 * MS);
    OK(cuEventQuery(eb));
    OK(cuStreamQuery(s1));
    RC(cuStreamQuery(s2), CUDA_ERROR_NOT_READY);
    OK(cuEventElapsedTime(&ms, ea, eb));
    CHECK(near(ms, 50));
    OK(cuStreamSynchronize(s2));
    t1 = now_ns() - t0;
    CHECK(t1 >= 80 * MS && t1 < 95 * MS);
    OK(cuEventElapsedTime(&ms, eb, ec));
    CHECK(near(ms, 30));
    OK(cuEventElapsedTime(&ms, ec, ea));
    CHECK(near(ms, -80));

    /* cuCtxSynchronize and the legacy stream wait for every stream. */
    t0 = now_ns();
    OK(busy(s1, 20 * MS));
    OK(cuCtxSynchronize());
    CHECK(now_ns() - t0 >= 20 * MS);
    t0 = now_ns();
    OK(busy(s2, 20 * MS));
    OK(cuStreamSynchronize(NULL));
    CHECK(now_ns() - t0 >= 20 * MS);
    t0 = now_ns();
    OK(busy(NULL, 10 * MS));
    OK(busy(CU_STREAM_PER_THREAD, 10 * MS));
    OK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
    CHECK(now_ns() - t0 >= 20 * MS);

    /* A synchronous copy waits for the context's work; an asynchronous one does not. */
    CUdeviceptr dp;
    char host[64];
    OK(cuMemAlloc(&dp, sizeof host));
    t0 = now_ns();
    OK(busy(s1, 30 * MS));
    OK(cuMemcpyDtoHAsync(host, dp, sizeof host, s2));
    CHECK(now_ns() - t0 < 5 * MS);
    OK(cuMemcpyDtoH(host, dp, sizeof host));
    CHECK(now_ns() - t0 >= 30 * MS);
    OK(cuMemFree(dp));

    /* A host function runs after the work queued before it. */
    t0 = now_ns();
    OK(busy(s1, 30 * MS));
    RC(cuLaunchHostFunc(s1, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    OK(cuLaunchHostFunc(s1, host_fn, NULL));
    CHECK(host_ran_at - t0 >= 30 * MS);
    OK(cuEventRecord(ea, s1));
    OK(cuEventQuery(ea));

    /* Bad launches. */
    RC(cuLaunchKernel(busy_fn, 1, 1, 1, 1, 1, 1, 0, s1, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    unsigned long long too_long = 11000 * MS;
    void *params[] = {&too_long};
    RC(cuLaunchKernel(busy_fn, 1, 1, 1, 1, 1, 1, 0, s1, params, NULL), CUDA_ERROR_INVALID_VALUE);
    RC(cuLaunchKernel(busy_fn, 0, 1, 1, 1, 1, 1, 0, s1, params, NULL), CUDA_ERROR_INVALID_VALUE);
    RC(cuLaunchKernel((CUfunction)s1, 1, 1, 1, 1, 1, 1, 0, s1, NULL, NULL),
       CUDA_ERROR_INVALID_HANDLE);
    OK(cuStreamDestroy(s1));
    RC(busy(s1, MS), CUDA_ERROR_INVALID_HANDLE);
    printf("ok\n");
    return 0;
}

/* Every launch path runs its kernels for their durations. */
static int cmd_paths(void)
{
    setup(0);
    CUstream s;
    OK(cuStreamCreate(&s, 0));
    unsigned long long ns = 10 * MS;
    void *params[] = {&ns};
    unsigned long long t0 = now_ns();
    /* cuLaunchKernelEx and cooperative launches. */
    CUlaunchConfig cfg = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1,
                          .blockDimY = 1, .blockDimZ = 1, .hStream = s};
    OK(cuLaunchKernelEx(&cfg, busy_fn, params, NULL));
    OK(cuLaunchCooperativeKernel(busy_fn, 1, 1, 1, 1, 1, 1, 0, s, params));
    /* The parameter buffer form. */
    size_t size = sizeof ns;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &ns, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    OK(cuLaunchKernel(busy_fn, 1, 1, 1, 1, 1, 1, 0, s, NULL, extra));
    /* A library's kernel, as a function and as itself. */
    CUlibrary lib;
    CUkernel k;
    CUfunction kf;
    OK(cuLibraryLoadData(&lib, "any image", NULL, NULL, 0, NULL, NULL, 0));
    OK(cuLibraryGetKernel(&k, lib, "cgpu_sim_busy"));
    OK(cuKernelGetFunction(&kf, k));
    OK(cuLaunchKernel(kf, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    OK(cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    const char *name = NULL;
    OK(cuFuncGetName(&name, kf));
    CHECK(!strcmp(name, "cgpu_sim_busy"));
    CUmodule m;
    RC(cuModuleLoad(&m, "/nonexistent/kernels.cubin"), CUDA_ERROR_FILE_NOT_FOUND);
    /* A graph of three kernel nodes, launched twice. */
    CUgraph g;
    CUgraphNode n[3];
    CUgraphExec x;
    OK(cuGraphCreate(&g, 0));
    CUDA_KERNEL_NODE_PARAMS kp = {.func = busy_fn, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1,
                                  .blockDimX = 1, .blockDimY = 1, .blockDimZ = 1,
                                  .kernelParams = params};
    OK(cuGraphAddKernelNode(&n[0], g, NULL, 0, &kp));
    OK(cuGraphAddKernelNode(&n[1], g, &n[0], 1, &kp));
    OK(cuGraphAddKernelNode(&n[2], g, &n[1], 1, &kp));
    OK(cuGraphInstantiate(&x, g, 0));
    OK(cuGraphDestroy(g));
    OK(cuGraphLaunch(x, s));
    OK(cuGraphLaunch(x, s));
    OK(cuGraphExecDestroy(x));
    CHECK(now_ns() - t0 < 5 * MS);
    OK(cuStreamSynchronize(s));
    unsigned long long took = now_ns() - t0;
    if (!(took >= 110 * MS && took < 130 * MS))   /* 5 launches + 6 graph nodes of 10 ms */
        fprintf(stderr, "took %.3f ms\n", (double)took / 1e6);
    CHECK(took >= 110 * MS && took < 130 * MS);
    OK(cuLibraryUnload(lib));
    /* Other kernels take CGPU_SIM_KERNEL_NS each. */
    t0 = now_ns();
    for (int i = 0; i < 10; i++)
        OK(cuLaunchKernel(other_fn, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
    OK(cuStreamSynchronize(s));
    printf("{\"other_ms\": %.3f}\n", (double)(now_ns() - t0) / 1e6);
    return 0;
}

/* run <ns> <count> <start> [linger]: at monotonic time <start>, launch
 * <count> kernels of <ns> each, wait for them; print when it began and
 * ended; with "linger", then wait for stdin to close. */
static int cmd_run(int argc, char **argv)
{
    CHECK(argc >= 5);
    setup(0);
    unsigned long long ns = strtoull(argv[2], NULL, 10), start = strtoull(argv[4], NULL, 10);
    int count = atoi(argv[3]);
    CUstream s;
    OK(cuStreamCreate(&s, 0));
    sleep_until(start);
    unsigned long long t0 = now_ns();
    for (int i = 0; i < count; i++)
        OK(busy(s, ns));
    OK(cuStreamSynchronize(s));
    printf("{\"pid\": %d, \"begin\": %llu, \"end\": %llu}\n", (int)getpid(), t0, now_ns());
    fflush(stdout);
    if (argc > 5 && !strcmp(argv[5], "linger")) /* stay alive until stdin closes */
        while (getchar() != EOF)
            ;
    return 0;
}

/* pulses <ns> <start> <gap_ns> <n>: at monotonic time <start> + i * <gap_ns>, launch
 * one kernel of <ns> and wait for it (i < n); print "done", then wait for stdin to close. */
static int cmd_pulses(int argc, char **argv)
{
    CHECK(argc >= 6);
    setup(0);
    unsigned long long ns = strtoull(argv[2], NULL, 10), start = strtoull(argv[3], NULL, 10);
    unsigned long long gap = strtoull(argv[4], NULL, 10);
    int n = atoi(argv[5]);
    for (int i = 0; i < n; i++) {
        sleep_until(start + (unsigned long long)i * gap);
        OK(busy(NULL, ns));
        OK(cuCtxSynchronize());
    }
    printf("{\"pid\": %d}\n", (int)getpid());
    fflush(stdout);
    while (getchar() != EOF)
        ;
    return 0;
}

/* saturate <ns> <ms> <start>: from monotonic time <start>, launch kernels
 * of <ns> for <ms> milliseconds, wait for them, print how many, then wait
 * for stdin to close. */
static int cmd_saturate(int argc, char **argv)
{
    CHECK(argc >= 5);
    setup(0);
    unsigned long long ns = strtoull(argv[2], NULL, 10), span = strtoull(argv[3], NULL, 10) * MS;
    unsigned long long start = strtoull(argv[4], NULL, 10), n = 0;
    CUstream s;
    OK(cuStreamCreate(&s, 0));
    sleep_until(start);
    unsigned long long late = now_ns() - start;
    while (now_ns() < start + span) {
        OK(busy(s, ns));
        n++;
    }
    OK(cuStreamSynchronize(s));
    printf("{\"pid\": %d, \"kernels\": %llu, \"late_ns\": %llu, \"end\": %llu}\n", (int)getpid(),
           n, late, now_ns());
    fflush(stdout);
    while (getchar() != EOF)
        ;
    return 0;
}

/* hold <ns> <count>: queue the kernels, say so, and wait to be killed. */
static int cmd_hold(int argc, char **argv)
{
    CHECK(argc >= 4);
    setup(0);
    unsigned long long ns = strtoull(argv[2], NULL, 10);
    int count = atoi(argv[3]);
    for (int i = 0; i < count; i++)
        OK(busy(NULL, ns));
    printf("queued %llu\n", now_ns());
    fflush(stdout);
    for (;;)
        pause();
}

/* queue: with CGPU_SIM_QUEUE_DEPTH=4, the fifth pending launch waits for the first. */
static int cmd_queue(void)
{
    setup(0);
    CUstream s;
    OK(cuStreamCreate(&s, 0));
    unsigned long long t0 = now_ns();
    for (int i = 0; i < 4; i++)
        OK(busy(s, 50 * MS));
    unsigned long long four = now_ns() - t0;
    OK(busy(s, 50 * MS));
    unsigned long long five = now_ns() - t0;
    printf("{\"four_ms\": %.3f, \"five_ms\": %.3f}\n", (double)four / 1e6, (double)five / 1e6);
    return 0;
}

/* cost <n>: the mean time of a launch of a 0 ns kernel, in ns. */
static int cmd_cost(int argc, char **argv)
{
    CHECK(argc >= 3);
    setup(0);
    int n = atoi(argv[2]);
    CUstream s;
    OK(cuStreamCreate(&s, 0));
    for (int i = 0; i < 1000; i++)
        OK(busy(s, 0));
    unsigned long long t0 = now_ns();
    for (int i = 0; i < n; i++)
        OK(busy(s, 0));
    double per = (double)(now_ns() - t0) / n;
    OK(cuStreamSynchronize(s));
    printf("{\"launch_ns\": %.1f}\n", per);
    return 0;
}

/* crossdev: a stream on device 1 waits for an event recorded on device 0. */
static int cmd_crossdev(void)
{
    setup(0);
    CUstream s0, s1;
    CUevent e0, e1;
    OK(cuStreamCreate(&s0, 0));
    OK(cuEventCreate(&e0, 0));
    CUcontext c1;
    OK(cuDevicePrimaryCtxRetain(&c1, 1));
    unsigned long long t0 = now_ns();
    OK(busy(s0, 40 * MS));
    OK(cuEventRecord(e0, s0));
    OK(cuCtxSetCurrent(c1));
    OK(cuStreamCreate(&s1, 0));
    OK(cuEventCreate(&e1, 0));
    OK(cuStreamWaitEvent(s1, e0, 0));
    OK(busy(s1, 10 * MS));
    OK(cuEventRecord(e1, s1));
    OK(cuEventSynchronize(e1));
    unsigned long long took = now_ns() - t0;
    CHECK(took >= 50 * MS && took < 65 * MS);
    /* Without the wait, device 1 is free at once. */
    t0 = now_ns();
    OK(cuCtxSetCurrent(NULL));
    OK(cuDevicePrimaryCtxRetain(&c1, 0));
    OK(cuCtxSetCurrent(c1));
    OK(busy(s0, 40 * MS));
    OK(cuDevicePrimaryCtxRetain(&c1, 1));
    OK(cuCtxSetCurrent(c1));
    OK(busy(s1, 10 * MS));
    OK(cuStreamSynchronize(s1));
    took = now_ns() - t0;
    CHECK(took >= 10 * MS && took < 25 * MS);
    printf("ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    const char *c = argv[1];
    if (!strcmp(c, "semantics")) return cmd_semantics();
    if (!strcmp(c, "paths")) return cmd_paths();
    if (!strcmp(c, "run")) return cmd_run(argc, argv);
    if (!strcmp(c, "hold")) return cmd_hold(argc, argv);
    if (!strcmp(c, "saturate")) return cmd_saturate(argc, argv);
    if (!strcmp(c, "pulses")) return cmd_pulses(argc, argv);
    if (!strcmp(c, "queue")) return cmd_queue();
    if (!strcmp(c, "cost")) return cmd_cost(argc, argv);
    if (!strcmp(c, "crossdev")) return cmd_crossdev();
    return 2;
}
