/* The helpers every sim_bytes command uses: the driver's handle and look-up
 * by name (for the legacy and per-thread entry points cuda.h hides), the
 * primary context made current, deterministic byte patterns to copy and
 * compare, and the simulator's busy kernel to queue time on a stream. */
#include "sim_bytes.h"

#include <dlfcn.h>

static void *lib;

void bytes_init(void)
{
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib);
}

void *sym(const char *name) { void *p = dlsym(lib, name); CHECK(p); return p; }

CUcontext setup(void)
{
    CUdevice d;
    CUcontext c;
    OK(cuInit(0));
    OK(cuDeviceGet(&d, 0));
    OK(cuDevicePrimaryCtxRetain(&c, d));
    OK(cuCtxSetCurrent(c));
    return c;
}

void fill(unsigned char *p, size_t n, unsigned seed)
{
    unsigned x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (unsigned char)(x >> 16);
    }
}

static CUfunction busy_fn;

void busy(CUstream s, unsigned long long ms)
{
    if (!busy_fn) {
        CUmodule m;
        OK(cuModuleLoadData(&m, "any image"));
        OK(cuModuleGetFunction(&busy_fn, m, "cgpu_sim_busy"));
    }
    unsigned long long ns = ms * 1000000ULL;
    void *params[] = {&ns};
    OK(cuLaunchKernel(busy_fn, 1, 1, 1, 32, 1, 1, 0, s, params, NULL));
}
