/* A saturating GPU workload on the simulator, for the compute limit's tests and benchmark.
 *
 *   compute_load run <path> <kernel_ns> <seconds> [threads [idle_first_s [cycle_s]]]
 *     launch cgpu_sim_busy kernels of <kernel_ns> back to back for <seconds> through <path>:
 *     kernel, kernel_ptsz, ex, coop, graph (entry points found with dlsym), proc (cuLaunchKernel
 *     through cuGetProcAddress), direct (the linked symbol), raw (libcuda.so.1 opened by the
 *     absolute path in CGPU_TEST_RAW_LIBCUDA and its cuLaunchKernel found with libc's own dlsym:
 *     past the shim's gate, as a hostile program would) or mixed (raw in odd threads, kernel in
 *     even ones); prints "launched N".  With cycle_s, it saturates for cycle_s, then waits for its
 *     work and idles for cycle_s, and so on (a neighbour that wakes and idles).  With
 *     COMPUTE_LOAD_SYNC_EVERY=N in the environment, it waits for its work every N launches (a
 *     training loop that reads its loss each step), else it keeps the driver's queue full.  With
 *     COMPUTE_LOAD_THREAD_LIFE_S=T, each launching thread ends after T seconds and a new one
 *     takes its place (threads that come and go, as a server's pool).
 *   compute_load cost <path> <launches>
 *     time <launches> launches of a 0 ns kernel, best of 5 rounds 100 ms apart (a limited
 *     container's budget refills between them), each after an untimed launch (under the arbiter
 *     it waits for the GPU, given up in the pause: what is timed is the launch while holding
 *     it); prints "ns_per_launch X".
 *   compute_load lookup
 *     print "same" or "wrapped" for each launch entry point: whether dlsym and cuGetProcAddress
 *     hand out the driver's own function (the address that dlvsym in libcuda gives).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OK(call) do { CUresult rc_ = (call); if (rc_ != CUDA_SUCCESS) { \
    fprintf(stderr, "FAIL %s:%d: %s -> %d\n", __FILE__, __LINE__, #call, (int)rc_); exit(1); } } while (0)

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, CUstream, void **, void **);
typedef CUresult (*ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*coop_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void **);
typedef CUresult (*graph_fn)(CUgraphExec, CUstream);

static CUfunction busy_fn;
static CUcontext ctx;
static const char *path;
static unsigned long long kernel_ns;
static double seconds;
static double cycle_s; /* busy and idle phases of this length (0: always busy) */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *sym(const char *name)
{
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p) {
        fprintf(stderr, "FAIL no %s\n", name);
        exit(1);
    }
    return p;
}

static void setup(void)
{
    OK(cuInit(0));
    OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    OK(cuCtxSetCurrent(ctx));
    CUmodule m;
    OK(cuModuleLoadData(&m, "any image"));
    OK(cuModuleGetFunction(&busy_fn, m, "cgpu_sim_busy"));
}

/* cuLaunchKernel of the driver itself, past the shim: libc's dlsym on a handle of libcuda.so.1
 * opened by its absolute path. */
static launch_fn raw_launch(void)
{
    typedef void *(*dlsym_fn)(void *, const char *);
    const char *lib = getenv("CGPU_TEST_RAW_LIBCUDA");
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    void *cuda = lib ? dlopen(lib, RTLD_NOW) : NULL;
    dlsym_fn real = libc ? (dlsym_fn)dlvsym(libc, "dlsym", "GLIBC_2.34") : NULL;
    if (!real && libc)
        real = (dlsym_fn)dlvsym(libc, "dlsym", "GLIBC_2.2.5");
    launch_fn fn = cuda && real ? (launch_fn)real(cuda, "cuLaunchKernel") : NULL;
    if (!fn) {
        fprintf(stderr, "FAIL no raw cuLaunchKernel (CGPU_TEST_RAW_LIBCUDA=%s)\n", lib ? lib : "");
        exit(1);
    }
    return fn;
}

/* Launch kernels through `path` until `seconds` have passed; returns the count. */
static unsigned long long saturate(int index, double secs)
{
    unsigned long long ns = kernel_ns, n = 0;
    void *params[] = {&ns};
    launch_fn launch = NULL;
    ex_fn ex = NULL;
    coop_fn coop = NULL;
    graph_fn graph = NULL;
    CUgraphExec exec = NULL;
    OK(cuCtxSetCurrent(ctx));
    if (!strcmp(path, "raw") || (!strcmp(path, "mixed") && index % 2)) {
        launch = raw_launch();
    } else if (!strcmp(path, "kernel") || !strcmp(path, "direct") || !strcmp(path, "mixed")) {
        launch = !strcmp(path, "direct") ? &cuLaunchKernel : (launch_fn)sym("cuLaunchKernel");
    } else if (!strcmp(path, "kernel_ptsz")) {
        launch = (launch_fn)sym("cuLaunchKernel_ptsz");
    } else if (!strcmp(path, "proc")) {
        CUdriverProcAddressQueryResult q;
        OK(cuGetProcAddress_v2("cuLaunchKernel", (void **)&launch, 12000, 0, &q));
    } else if (!strcmp(path, "ex")) {
        ex = (ex_fn)sym("cuLaunchKernelEx");
    } else if (!strcmp(path, "coop")) {
        coop = (coop_fn)sym("cuLaunchCooperativeKernel");
    } else if (!strcmp(path, "graph")) {
        graph = (graph_fn)sym("cuGraphLaunch");
        CUgraph g;
        CUgraphNode node;
        CUDA_KERNEL_NODE_PARAMS kp = {.func = busy_fn, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1,
                                      .blockDimX = 32, .blockDimY = 1, .blockDimZ = 1, .kernelParams = params};
        OK(cuGraphCreate(&g, 0));
        OK(cuGraphAddKernelNode(&node, g, NULL, 0, &kp));
        OK(cuGraphInstantiate(&exec, g, 0));
    } else {
        fprintf(stderr, "FAIL unknown path %s\n", path);
        exit(2);
    }
    double start = now_s();
    const char *every = getenv("COMPUTE_LOAD_SYNC_EVERY");
    unsigned long long sync_every = every ? strtoull(every, NULL, 10) : 0;
    CUlaunchConfig cfg = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32, .blockDimY = 1, .blockDimZ = 1};
    double end = now_s() + secs;
    for (; now_s() < end; n++) {
        double t = now_s();
        if (cycle_s > 0 && (long)((t - start) / cycle_s) % 2) { /* an idle phase */
            OK(cuCtxSynchronize());
            double wake = start + ((long)((t - start) / cycle_s) + 1) * cycle_s - t;
            struct timespec idle = {(time_t)wake, (long)((wake - (time_t)wake) * 1e9)};
            nanosleep(&idle, NULL);
            n--;
            continue;
        }
        if (launch)
            OK(launch(busy_fn, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
        else if (ex)
            OK(ex(&cfg, busy_fn, params, NULL));
        else if (coop)
            OK(coop(busy_fn, 1, 1, 1, 32, 1, 1, 0, NULL, params));
        else
            OK(graph(exec, NULL));
        if (sync_every && (n + 1) % sync_every == 0)
            OK(cuCtxSynchronize());
    }
    return n;
}

struct worker {
    int index;
    unsigned long long count;
};

static double thread_life;

static void *life_main(void *arg)
{
    struct worker *w = arg;
    w->count += saturate(w->index, thread_life);
    return NULL;
}

static void *thread_main(void *arg)
{
    struct worker *w = arg;
    if (thread_life <= 0) {
        w->count = saturate(w->index, seconds);
        return NULL;
    }
    /* Threads that come and go: each launches for thread_life seconds and ends, and the next
     * takes its place, until the run's end. */
    for (double end = now_s() + seconds; now_s() < end;) {
        pthread_t t;
        if (pthread_create(&t, NULL, life_main, w) != 0 || pthread_join(t, NULL) != 0) {
            fprintf(stderr, "FAIL pthread\n");
            exit(2);
        }
    }
    return NULL;
}

static int run(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    path = argv[2];
    kernel_ns = strtoull(argv[3], NULL, 10);
    seconds = atof(argv[4]);
    int threads = argc > 5 ? atoi(argv[5]) : 1;
    double idle_first = argc > 6 ? atof(argv[6]) : 0.0; /* its context made, no launch yet */
    cycle_s = argc > 7 ? atof(argv[7]) : 0.0;
    const char *life = getenv("COMPUTE_LOAD_THREAD_LIFE_S");
    thread_life = life ? atof(life) : 0.0;
    setup();
    if (idle_first > 0) {
        struct timespec idle = {(time_t)idle_first, (long)((idle_first - (time_t)idle_first) * 1e9)};
        nanosleep(&idle, NULL);
        seconds -= idle_first;
    }
    pthread_t t[64];
    struct worker workers[64] = {{0}};
    unsigned long long total = 0;
    for (int i = 0; i < threads && i < 64; i++) {
        workers[i].index = i;
        pthread_create(&t[i], NULL, thread_main, &workers[i]);
    }
    for (int i = 0; i < threads && i < 64; i++) {
        pthread_join(t[i], NULL);
        total += workers[i].count;
    }
    printf("launched %llu\n", total);
    return 0;
}

static int cost(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    path = argv[2];
    long n = atol(argv[3]);
    kernel_ns = 0;
    setup();
    unsigned long long ns = 0;
    void *params[] = {&ns};
    launch_fn launch;
    if (!strcmp(path, "direct")) {
        launch = &cuLaunchKernel;
    } else if (!strcmp(path, "proc")) {
        CUdriverProcAddressQueryResult q;
        OK(cuGetProcAddress_v2("cuLaunchKernel", (void **)&launch, 12000, 0, &q));
    } else {
        launch = (launch_fn)sym("cuLaunchKernel");
    }
    double best = 1e9;
    for (int round = 0; round < 5; round++) {
        /* Untimed: under the arbiter the process went idle in the pause and gave the GPU up, so
         * this launch waits for a grant.  What is timed is the launch while holding the GPU. */
        OK(launch(busy_fn, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
        double t0 = now_s();
        for (long i = 0; i < n; i++)
            OK(launch(busy_fn, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
        double per = (now_s() - t0) / (double)n * 1e9;
        best = per < best ? per : best;
        OK(cuCtxSynchronize());
        /* Let a limited container's budget refill: what is timed is the launch path within
         * budget, not the wait that enforces the limit. */
        struct timespec pause = {0, 100000000};
        nanosleep(&pause, NULL);
    }
    printf("ns_per_launch %.1f\n", best);
    return 0;
}

/* Which library `p` lies in: "driver" (libcuda), "shim" (libcgpu) or "other". */
static const char *where(void *p)
{
    Dl_info info;
    if (!p || !dladdr(p, &info) || !info.dli_fname)
        return "none";
    return strstr(info.dli_fname, "libcuda") ? "driver" : strstr(info.dli_fname, "libcgpu") ? "shim" : "other";
}

static int lookup(void)
{
    static const char *const names[] = {"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx",
                                        "cuLaunchKernelEx_ptsz", "cuLaunchCooperativeKernel",
                                        "cuLaunchCooperativeKernel_ptsz", "cuGraphLaunch", "cuGraphLaunch_ptsz"};
    OK(cuInit(0));
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char plain[64];
        snprintf(plain, sizeof plain, "%s", names[i]);
        char *pt = strstr(plain, "_ptsz");
        if (pt)
            *pt = 0;
        void *by_proc = NULL;
        CUdriverProcAddressQueryResult q;
        cuuint64_t flags = pt ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
        CUresult rc = cuGetProcAddress_v2(plain, &by_proc, 12080, flags, &q);
        printf("%s dlsym=%s proc=%s\n", names[i], where(dlsym(RTLD_DEFAULT, names[i])),
               rc == CUDA_SUCCESS ? where(by_proc) : "none");
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "run"))
        return run(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "cost"))
        return cost(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "lookup"))
        return lookup();
    fprintf(stderr, "usage: compute_load run|cost|lookup ...\n");
    return 2;
}
