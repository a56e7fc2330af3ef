/* check23b's GPU workload for the simulator (second independent check of issue 23).
 *
 *   cb_load <kernel_ns> <seconds> [threads]
 *
 * Launches cgpu_sim_busy kernels back to back through cuLaunchKernel (found with dlsym, as an
 * application that loads CUDA lazily does) for <seconds> from CB_T0, then exits. Behaviour
 * from the environment (times in seconds, CLOCK_MONOTONIC, counted from CB_T0, the harness's
 * window origin, so phases line up with its windows):
 *   CB_T0                 origin (default: now)
 *   CB_KMIN_NS/CB_KMAX_NS each kernel's length drawn log-uniformly in [min, max]
 *   CB_BUSY_S/CB_IDLE_S   launch for BUSY_S, then nothing for IDLE_S, and again
 *   CB_QUIT_AT            from then on launch nothing, but keep the context until the end
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

static CUfunction fn;
static CUcontext ctx;
static launch_fn launch;
static double t0, end_at, busy_s, idle_s, quit_at;
static unsigned long long kernel_ns, kmin, kmax;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double env(const char *name, double dflt)
{
    const char *v = getenv(name);
    return v && *v ? atof(v) : dflt;
}

static void nap(double s)
{
    if (s > 0.05)
        s = 0.05; /* wake often: the phases are short */
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Whether the process launches at time t (seconds from t0). */
static int busy_at(double t)
{
    if (quit_at > 0 && t >= quit_at)
        return 0;
    if (busy_s > 0 && idle_s > 0)
        return fmod(t, busy_s + idle_s) < busy_s;
    return 1;
}

static void *worker(void *arg)
{
    unsigned seed = (unsigned)(size_t)arg * 2654435761u ^ (unsigned)(now() * 1e6);
    unsigned long long ns = kernel_ns, n = 0;
    void *params[] = {&ns};
    OK(cuCtxSetCurrent(ctx));
    for (double t; (t = now()) < end_at;) {
        if (!busy_at(t - t0)) {
            nap(end_at - t);
            continue;
        }
        if (kmax > kmin) {
            double u = (double)rand_r(&seed) / ((double)RAND_MAX + 1.0);
            ns = (unsigned long long)exp(log((double)kmin) + u * (log((double)kmax) - log((double)kmin)));
        }
        OK(launch(fn, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
        n++;
    }
    *(unsigned long long *)arg = n;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: cb_load <kernel_ns> <seconds> [threads]\n");
        return 2;
    }
    kernel_ns = strtoull(argv[1], NULL, 10);
    int threads = argc > 3 ? atoi(argv[3]) : 1;
    if (threads < 1 || threads > 16)
        return 2;
    t0 = env("CB_T0", now());
    end_at = t0 + atof(argv[2]);
    kmin = (unsigned long long)env("CB_KMIN_NS", 0);
    kmax = (unsigned long long)env("CB_KMAX_NS", 0);
    busy_s = env("CB_BUSY_S", 0);
    idle_s = env("CB_IDLE_S", 0);
    quit_at = env("CB_QUIT_AT", 0);
    launch = (launch_fn)dlsym(RTLD_DEFAULT, "cuLaunchKernel");
    if (!launch) {
        fprintf(stderr, "FAIL no cuLaunchKernel\n");
        return 1;
    }
    OK(cuInit(0));
    OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    OK(cuCtxSetCurrent(ctx));
    CUmodule m;
    OK(cuModuleLoadData(&m, "any image"));
    OK(cuModuleGetFunction(&fn, m, "cgpu_sim_busy"));
    pthread_t t[16];
    unsigned long long counts[16], total = 0;
    for (int i = 0; i < threads; i++) {
        counts[i] = (unsigned long long)i + 1;
        pthread_create(&t[i], NULL, worker, &counts[i]);
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        total += counts[i];
    }
    printf("launched %llu\n", total);
    return 0;
}
