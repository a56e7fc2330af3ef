/* An inference stand-in on the simulator, for benchmarks/compute_share.py's priority cases.
 *
 *   inference_load <kernel_ns> <rate per s> <seconds> <report file> [skip_s [seed]]
 *
 * Requests arrive as a Poisson process at <rate> for <seconds>; each is one cgpu_sim_busy
 * kernel of <kernel_ns> and a cuCtxSynchronize (the answer read back). A request that arrives
 * while an earlier one runs waits for it (one server, first come first served). Its latency is
 * from its arrival to the end of its sync. The report gets one line:
 *   requests N p50 X p99 Y max Z
 * in ms, over the requests that arrived after <skip_s> (default 1: the first window is the
 * start-up's), and "busy_ms B": the requests' kernel time.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define OK(call) do { CUresult rc_ = (call); if (rc_ != CUDA_SUCCESS) { \
    fprintf(stderr, "FAIL %s:%d: %s -> %d\n", __FILE__, __LINE__, #call, (int)rc_); exit(1); } } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_until(double t)
{
    double left = t - now_s();
    if (left <= 0)
        return;
    struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
    nanosleep(&ts, NULL);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s kernel_ns rate seconds report [skip_s [seed]]\n", argv[0]);
        return 2;
    }
    unsigned long long ns = strtoull(argv[1], NULL, 10);
    double rate = atof(argv[2]), seconds = atof(argv[3]);
    const char *report = argv[4];
    double skip = argc > 5 ? atof(argv[5]) : 1.0;
    unsigned seed = argc > 6 ? (unsigned)atoi(argv[6]) : 35;

    CUcontext ctx;
    CUmodule m;
    CUfunction busy;
    OK(cuInit(0));
    OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    OK(cuCtxSetCurrent(ctx));
    OK(cuModuleLoadData(&m, "any image"));
    OK(cuModuleGetFunction(&busy, m, "cgpu_sim_busy"));
    void *params[] = {&ns};

    size_t cap = (size_t)(rate * seconds * 2) + 16, n = 0, served = 0;
    double *lat = malloc(cap * sizeof *lat);
    if (!lat)
        return 1;
    srand48(seed);
    double start = now_s(), arrival = start;
    for (;;) {
        arrival += -log(1.0 - drand48()) / rate;
        if (arrival - start >= seconds)
            break;
        sleep_until(arrival); /* an arrival already past waited for the one before it */
        OK(cuLaunchKernel(busy, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
        OK(cuCtxSynchronize());
        served++;
        if (arrival - start >= skip && n < cap)
            lat[n++] = (now_s() - arrival) * 1e3;
    }
    qsort(lat, n, sizeof *lat, cmp);
    FILE *f = fopen(report, "w");
    if (!f)
        return 1;
    if (n)
        fprintf(f, "requests %zu p50 %.3f p99 %.3f max %.3f busy_ms %.1f\n", n, lat[n / 2],
                lat[(size_t)(0.99 * (double)(n - 1))], lat[n - 1], (double)served * (double)ns / 1e6);
    else
        fprintf(f, "requests 0\n");
    fclose(f);
    free(lat);
    return 0;
}
