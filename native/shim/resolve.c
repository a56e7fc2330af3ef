/* The real driver and NVML behind the shim (see resolve.h). */
#include "resolve.h"

#include <dlfcn.h>
#include <stddef.h>

/* Sanitizer runtimes call dlsym before they are set up: those paths stay uninstrumented. */
#define NO_SANITIZE __attribute__((no_sanitize("address", "thread", "undefined")))

static const char *const hook_names[H_COUNT] = {
#define HOOK(sym, base, ver, pt) [H_##sym] = #sym,
#define NVML_HOOK(sym) [H_##sym] = #sym,
#define LAUNCH_HOOK(sym, base, ver, pt) [H_##sym] = #sym,
#include "hooks.def"
#undef HOOK
#undef NVML_HOOK
#undef LAUNCH_HOOK
};

static const unsigned char hook_is_nvml[H_COUNT] = {
#define HOOK(sym, base, ver, pt) [H_##sym] = 0,
#define NVML_HOOK(sym) [H_##sym] = 1,
#define LAUNCH_HOOK(sym, base, ver, pt) [H_##sym] = 0,
#include "hooks.def"
#undef HOOK
#undef NVML_HOOK
#undef LAUNCH_HOOK
};

void *shim_real_fns[H_COUNT];

static dlsym_fn real_dlsym_ptr;

NO_SANITIZE dlsym_fn shim_real_dlsym(void)
{
    dlsym_fn f = __atomic_load_n(&real_dlsym_ptr, __ATOMIC_RELAXED);
    if (likely(f))
        return f;
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.0"};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0] && !f; i++)
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    __atomic_store_n(&real_dlsym_ptr, f, __ATOMIC_RELAXED);
    return f;
}

static void *lib_handle(const char *soname, void **cache, int load)
{
    void *h = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (h)
        return h;
    h = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
    if (!h && load)
        h = dlopen(soname, RTLD_LAZY);
    if (h)
        __atomic_store_n(cache, h, __ATOMIC_RELEASE);
    return h;
}

static void *cuda_handle_cache, *nvml_handle_cache;

void *shim_driver_sym(const char *name)
{
    void *h = lib_handle("libcuda.so.1", &cuda_handle_cache, 1);
    dlsym_fn rd = shim_real_dlsym();
    return h && rd ? rd(h, name) : NULL;
}

void *shim_loaded_driver_sym(const char *name)
{
    void *h = lib_handle("libcuda.so.1", &cuda_handle_cache, 0);
    dlsym_fn rd = shim_real_dlsym();
    return h && rd ? rd(h, name) : NULL;
}

void *shim_nvml_sym(const char *name)
{
    void *h = lib_handle("libnvidia-ml.so.1", &nvml_handle_cache, 1);
    dlsym_fn rd = shim_real_dlsym();
    return h && rd ? rd(h, name) : NULL;
}

/* Whether `p` lies in this library: then it is one of our wrappers, not the real one. */
static int ours(void *p)
{
    Dl_info mine, theirs;
    return dladdr((void *)&ours, &mine) && dladdr(p, &theirs) && mine.dli_fbase == theirs.dli_fbase;
}

void shim_record_real(int id, void *p)
{
    if (p)
        __atomic_store_n(&shim_real_fns[id], p, __ATOMIC_RELAXED);
}

void *shim_resolve_real(int id)
{
    void *p = hook_is_nvml[id] ? shim_nvml_sym(hook_names[id]) : shim_driver_sym(hook_names[id]);
    if (p && ours(p))
        p = NULL;
    shim_record_real(id, p);
    return p;
}

int shim_missing_fn(void)
{
    return 500; /* CUDA_ERROR_NOT_FOUND */
}
