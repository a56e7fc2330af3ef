/* The entry points that submit GPU work (the LAUNCH_HOOK lines of hooks.def).
 *
 * Without a compute limit they cost nothing: dlsym and cuGetProcAddress hand out the real
 * function (entry.c), and the exported symbol, which a directly linked program calls, jumps
 * through launch_to[], set once to the real function (one load and an indirect tail jump).
 * With a limit, launch_to[] and the lookups give the gated wrapper: take a ticket or pass the
 * arbiter's gate (compute_admit), call the real function, and (token mode) say the driver has
 * the work (compute_submitted), so a REVOKE knows what it must wait for.
 *
 * Gated: every kernel launch (plain, Ex, cooperative, multi-device cooperative, the legacy
 * cuLaunch/cuLaunchGrid) and graph launches.  Not gated: memcpy (copy engines, not SM time)
 * and memset (a bandwidth-bound fill; see docs/architecture.md, "Compute share"). */
#include <cuda.h>

#include "compute.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static void *launch_to[H_COUNT];

static __attribute__((noinline)) void *launch_resolve(int id, void *gated)
{
    void *real = real_fn(id);
    void *p = compute_enabled() ? gated : real ? real : (void *)&shim_missing_fn;
    if (real || p == gated)
        __atomic_store_n(&launch_to[id], p, __ATOMIC_RELAXED);
    return p;
}

static inline void *target(int id, void *gated)
{
    void *p = __atomic_load_n(&launch_to[id], __ATOMIC_RELAXED);
    return likely(p != 0) ? p : launch_resolve(id, gated);
}

/* The gated wrapper shim_gated_<sym> (what the lookups hand out under a limit) and the
 * exported <sym> (what direct linking reaches). */
#define LAUNCH(sym, params, args)                                                              \
    CUresult shim_gated_##sym params;                                                          \
    EXPORT CUresult sym params                                                                 \
    {                                                                                          \
        return ((__typeof__(&shim_gated_##sym))target(H_##sym, (void *)&shim_gated_##sym))args; \
    }                                                                                          \
    CUresult shim_gated_##sym params                                                           \
    {                                                                                          \
        int held = compute_admit();                                                            \
        CUresult rc = REAL(sym) args;                                                          \
        compute_submitted(held);                                                               \
        return rc;                                                                             \
    }

#define KERNEL_PARAMS                                                                          \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, \
     unsigned int bz, unsigned int shmem, CUstream s, void **params, void **extra)
#define KERNEL_ARGS (f, gx, gy, gz, bx, by, bz, shmem, s, params, extra)
#define COOP_PARAMS                                                                            \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by, \
     unsigned int bz, unsigned int shmem, CUstream s, void **params)
#define COOP_ARGS (f, gx, gy, gz, bx, by, bz, shmem, s, params)

LAUNCH(cuLaunchKernel, KERNEL_PARAMS, KERNEL_ARGS)
LAUNCH(cuLaunchKernel_ptsz, KERNEL_PARAMS, KERNEL_ARGS)
LAUNCH(cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **params, void **extra),
       (config, f, params, extra))
LAUNCH(cuLaunchKernelEx_ptsz, (const CUlaunchConfig *config, CUfunction f, void **params, void **extra),
       (config, f, params, extra))
LAUNCH(cuLaunchCooperativeKernel, COOP_PARAMS, COOP_ARGS)
LAUNCH(cuLaunchCooperativeKernel_ptsz, COOP_PARAMS, COOP_ARGS)
LAUNCH(cuLaunchCooperativeKernelMultiDevice,
       (CUDA_LAUNCH_PARAMS *list, unsigned int ndev, unsigned int flags), (list, ndev, flags))
LAUNCH(cuGraphLaunch, (CUgraphExec g, CUstream s), (g, s))
LAUNCH(cuGraphLaunch_ptsz, (CUgraphExec g, CUstream s), (g, s))
LAUNCH(cuLaunch, (CUfunction f), (f))
LAUNCH(cuLaunchGrid, (CUfunction f, int w, int h), (f, w, h))
LAUNCH(cuLaunchGridAsync, (CUfunction f, int w, int h, CUstream s), (f, w, h, s))
