/* check23's GPU workload on the simulator (an independent check of issue 23's compute share).
 * Same command line as tests/shim/compute_load.c's `run`, so compute_kit.Container starts it:
 *
 *   check_load run <kernel|kernel_ptsz> <kernel_ns> <seconds> [threads]
 *
 * Extra behaviour from the environment:
 *   CHECK_KMIN_NS, CHECK_KMAX_NS  each launch's kernel length drawn log-uniformly in [min, max]
 *   CHECK_BUSY_S, CHECK_IDLE_S    alternate: launch for BUSY_S, then launch nothing for IDLE_S,
 *                                 phases counted from CHECK_T0 (CLOCK_MONOTONIC seconds; the
 *                                 harness's window origin), so they line up with the 1 s windows
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OK(call) do { CUresult rc_ = (call); if (rc_ != CUDA_SUCCESS) { \
    fprintf(stderr, "FAIL %s:%d: %s -> %d\n", __FILE__, __LINE__, #call, (int)rc_); exit(1); } } while (0)

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, CUstream, void **, void **);

static CUfunction busy_fn;
static CUcontext ctx;
static launch_fn launch;
static unsigned long long kernel_ns, kmin, kmax;
static double seconds, busy_s, idle_s, t0;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double env_d(const char *name, double dflt)
{
    const char *v = getenv(name);
    return v && *v ? atof(v) : dflt;
}

/* Seconds until the current idle phase ends (0 when busy). */
static double idle_left(double t)
{
    if (busy_s <= 0 || idle_s <= 0)
        return 0;
    double period = busy_s + idle_s;
    double phase = fmod(t - t0, period);
    if (phase < 0)
        phase += period;
    return phase >= busy_s ? period - phase : 0;
}

static void *saturate(void *arg)
{
    unsigned long long ns = kernel_ns, n = 0;
    unsigned seed = (unsigned)(size_t)arg ^ (unsigned)(now_s() * 1e6);
    void *params[] = {&ns};
    OK(cuCtxSetCurrent(ctx));
    double end = now_s() + seconds;
    for (double t; (t = now_s()) < end; n++) {
        double rest = idle_left(t);
        if (rest > 0) {
            if (rest > end - t)
                rest = end - t;
            struct timespec s = {(time_t)rest, (long)((rest - (double)(time_t)rest) * 1e9)};
            nanosleep(&s, NULL);
            continue;
        }
        if (kmax > kmin) {
            double u = (double)rand_r(&seed) / ((double)RAND_MAX + 1.0);
            ns = (unsigned long long)exp(log((double)kmin) + u * (log((double)kmax) - log((double)kmin)));
        }
        OK(launch(busy_fn, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
    }
    *(unsigned long long *)arg = n;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 5 || strcmp(argv[1], "run")) {
        fprintf(stderr, "usage: check_load run <kernel|kernel_ptsz> <kernel_ns> <seconds> [threads]\n");
        return 2;
    }
    const char *path = argv[2];
    kernel_ns = strtoull(argv[3], NULL, 10);
    seconds = atof(argv[4]);
    int threads = argc > 5 ? atoi(argv[5]) : 1;
    if (threads < 1 || threads > 64)
        return 2;
    kmin = (unsigned long long)env_d("CHECK_KMIN_NS", 0);
    kmax = (unsigned long long)env_d("CHECK_KMAX_NS", 0);
    busy_s = env_d("CHECK_BUSY_S", 0);
    idle_s = env_d("CHECK_IDLE_S", 0);
    t0 = env_d("CHECK_T0", now_s());
    const char *name = !strcmp(path, "kernel_ptsz") ? "cuLaunchKernel_ptsz" : "cuLaunchKernel";
    launch = (launch_fn)dlsym(RTLD_DEFAULT, name);
    if (!launch) {
        fprintf(stderr, "FAIL no %s\n", name);
        return 1;
    }
    OK(cuInit(0));
    OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    OK(cuCtxSetCurrent(ctx));
    CUmodule m;
    OK(cuModuleLoadData(&m, "any image"));
    OK(cuModuleGetFunction(&busy_fn, m, "cgpu_sim_busy"));
    pthread_t t[64];
    unsigned long long counts[64], total = 0;
    for (int i = 0; i < threads; i++) {
        counts[i] = (unsigned long long)i + 1;
        pthread_create(&t[i], NULL, saturate, &counts[i]);
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        total += counts[i];
    }
    printf("launched %llu\n", total);
    return 0;
}
