/* The real driver and NVML: library handles, the real dlsym, and each hook's real
 * function, resolved once.  Depends on nothing else of the shim. */
#ifndef CGPU_RESOLVE_H
#define CGPU_RESOLVE_H

#include "cgpu_macros.h"


/* Hook ids: one per line of hooks.def, CUDA first, then NVML. */
enum hook_id {
#define HOOK(sym, base, ver, pt) H_##sym,
#define NVML_HOOK(sym) H_##sym,
#define LAUNCH_HOOK(sym, base, ver, pt) H_##sym,
#include "hooks.def"
#undef HOOK
#undef NVML_HOOK
#undef LAUNCH_HOOK
    H_COUNT
};

typedef void *(*dlsym_fn)(void *, const char *);

/* glibc's dlsym (ours is exported under that name). */
dlsym_fn shim_real_dlsym(void);
/* Real entry points, never the shim's own; the library is loaded when needed. */
void *shim_driver_sym(const char *name);
void *shim_nvml_sym(const char *name);
/* The driver's own `name`, only if the program has loaded the driver already. */
void *shim_loaded_driver_sym(const char *name);

/* Each hook's real function; NULL until resolved. */
extern void *shim_real_fns[H_COUNT];
/* Remember `p` as hook `id`'s real function (the caller made sure it is not ours). */
void shim_record_real(int id, void *p);
/* Look hook `id` up in its library and remember it; NULL when missing. */
void *shim_resolve_real(int id);

static inline void *real_fn(int id)
{
    void *p = __atomic_load_n(&shim_real_fns[id], __ATOMIC_RELAXED);
    return likely(p != 0) ? p : shim_resolve_real(id);
}

/* A stand-in for a missing driver function: CUDA_ERROR_NOT_FOUND. */
int shim_missing_fn(void);

static inline void *real_or_missing(int id)
{
    void *p = real_fn(id);
    return likely(p != 0) ? p : (void *)&shim_missing_fn;
}

/* Call the real driver function `sym`; a missing one reports CUDA_ERROR_NOT_FOUND. */
#define REAL(sym) ((__typeof__(&sym))real_or_missing(H_##sym))

#endif
