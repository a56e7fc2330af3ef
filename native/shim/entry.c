/* The doors into the shim: the exported dlsym and cuGetProcAddress hand out the
 * wrappers of the one table in hooks.def (direct linking needs nothing: the
 * wrappers are exported under the real names). */
#include <cuda.h>
#include <string.h>

#include "cgpu_macros.h"
#include "cgpu_nvml.h"
#include "compute.h"
#include "resolve.h"


/* ---- the table ------------------------------------------------------------------- */

struct hook {
    const char *name;
    const char *base;
    int version;
    int per_thread;
    int nvml;
    int launch;     /* a LAUNCH_HOOK: handed out only under a compute limit */
    void *wrapper;  /* what the lookups hand out */
    void *exported; /* our exported symbol of that name */
};

/* The gated launch wrappers (hooks_launch.c). */
#define HOOK(sym, base, ver, pt)
#define NVML_HOOK(sym)
#define LAUNCH_HOOK(sym, base, ver, pt) extern __typeof__(sym) shim_gated_##sym;
#include "hooks.def"
#undef HOOK
#undef NVML_HOOK
#undef LAUNCH_HOOK

static const struct hook hooks[H_COUNT] = {
#define HOOK(sym, base, ver, pt) [H_##sym] = {#sym, #base, ver, pt, 0, 0, (void *)&sym, (void *)&sym},
#define NVML_HOOK(sym) [H_##sym] = {#sym, #sym, 0, 0, 1, 0, (void *)&sym, (void *)&sym},
#define LAUNCH_HOOK(sym, base, ver, pt) [H_##sym] = {#sym, #base, ver, pt, 0, 1, (void *)&shim_gated_##sym, (void *)&sym},
#include "hooks.def"
#undef HOOK
#undef NVML_HOOK
#undef LAUNCH_HOOK
};

/* Remember the real function of hook `id`, unless `p` is our own. */
static void record_real(int id, void *p)
{
    if (p && p != hooks[id].wrapper && p != hooks[id].exported)
        shim_record_real(id, p);
}

/* What a lookup hands out for hook `id` whose real function is `real`: the wrapper, or for a
 * launch entry point in a process without a compute limit, the real function itself. */
static void *handed_out(int id, void *real)
{
    if (hooks[id].launch && !compute_enabled())
        return real;
    return hooks[id].wrapper;
}

/* ---- cuGetProcAddress ------------------------------------------------------------ */

/* Which hooked variant the driver handed out for `symbol`: by address when we
 * know it, else by the driver's own rule (newest version <= cudaVersion, the
 * per-thread variant when asked for). */
static int pick_variant(const char *symbol, void *fn, int version, cuuint64_t flags)
{
    int best = -1, any = 0;
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    for (int pass = 0; pass < 2 && best < 0; pass++) {
        for (int i = 0; i < H_COUNT; i++) {
            if (strcmp(hooks[i].base, symbol) != 0) {
                if (pass == 0 && strcmp(hooks[i].name, symbol) == 0)
                    return i;
                continue;
            }
            any = 1;
            if (pass == 0) {
                void *r = real_fn(i); /* the exported variant, looked up in the driver */
                if (r && r == fn)
                    return i;
                continue;
            }
            if (hooks[i].version > version || hooks[i].per_thread != per_thread)
                continue;
            if (best < 0 || hooks[i].version > hooks[best].version)
                best = i;
        }
        if (pass == 1 && best < 0 && per_thread) {
            per_thread = 0; /* no per-thread variant: the driver gives the plain one */
            pass = 0;
        }
    }
    return any ? best : -1;
}

static void swap_in_wrapper(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    if (!symbol || !pfn || !*pfn || symbol[0] != 'c' || symbol[1] != 'u')
        return;
    int id = pick_variant(symbol, *pfn, version, flags);
    if (id < 0)
        return;
    if (*pfn == hooks[id].exported || *pfn == hooks[id].wrapper)
        return; /* the driver found us (global scope): leave it */
    record_real(id, *pfn);
    *pfn = handed_out(id, *pfn);
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *symbolStatus)
{
    CUresult rc = REAL(cuGetProcAddress_v2)(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (rc == CUDA_SUCCESS)
        swap_in_wrapper(symbol, pfn, cudaVersion, flags);
    return rc;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    CUresult rc = REAL(cuGetProcAddress)(symbol, pfn, cudaVersion, flags);
    if (rc == CUDA_SUCCESS)
        swap_in_wrapper(symbol, pfn, cudaVersion, flags);
    return rc;
}

/* ---- dlsym -------------------------------------------------------------------------- */

static int find_hook(const char *name)
{
    for (int i = 0; i < H_COUNT; i++)
        if (strcmp(hooks[i].name, name) == 0)
            return i;
    return -1;
}

/* Hand out the wrapper for a hooked name, remembering the real address. */
static __attribute__((noinline)) void *dlsym_hooked(void *handle, const char *name, int *matched)
{
    int id = find_hook(name);
    *matched = id >= 0;
    if (!*matched)
        return NULL;
    void *r = shim_real_dlsym()(handle, name);
    if (!r)
        return NULL;
    if (r == hooks[id].wrapper || r == hooks[id].exported) /* the global scope found us */
        r = hooks[id].nvml ? real_fn(id) : shim_loaded_driver_sym(name);
    if (r == hooks[id].wrapper || r == hooks[id].exported)
        r = NULL;
    record_real(id, r);
    return r ? handed_out(id, r) : NULL;
}

#if defined(__GNUC__) && !defined(__clang__)
#define SIBLING_CALLS __attribute__((optimize("optimize-sibling-calls")))
#else
#define SIBLING_CALLS
#endif

/* Everything that is not ours is a tail call, so that glibc still sees the
 * caller's return address and RTLD_NEXT keeps its meaning. */
EXPORT SIBLING_CALLS NO_SANITIZE void *dlsym(void *handle, const char *name)
{
    const char *volatile n = name; /* glibc declares it nonnull; callers still pass NULL */
    if (n && ((n[0] == 'c' && n[1] == 'u') || (n[0] == 'n' && n[1] == 'v' && n[2] == 'm'))) {
        int matched;
        void *w = dlsym_hooked(handle, name, &matched);
        if (matched)
            return w;
    }
    return shim_real_dlsym()(handle, name);
}

