/* The real driver and NVML behind the shim (see resolve.h). */
#include "resolve.h"

#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>

#include "cgpu_macros.h"


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

/* This library's address range, found once (dladdr costs thousands of instructions a call,
 * and a start resolves dozens of names). */
static uintptr_t own_lo, own_hi;

static int own_range_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    uintptr_t me = (uintptr_t)data, lo = UINTPTR_MAX, hi = 0;
    int mine = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = (uintptr_t)info->dlpi_addr + ph->p_vaddr, b = a + ph->p_memsz;
        lo = a < lo ? a : lo;
        hi = b > hi ? b : hi;
        mine |= me >= a && me < b;
    }
    if (!mine)
        return 0;
    __atomic_store_n(&own_lo, lo, __ATOMIC_RELAXED);
    __atomic_store_n(&own_hi, hi, __ATOMIC_RELEASE);
    return 1;
}

/* Whether `p` lies in this library: then it is one of our wrappers, not the real one. */
static int ours(void *p)
{
    if (!__atomic_load_n(&own_hi, __ATOMIC_ACQUIRE))
        dl_iterate_phdr(own_range_cb, (void *)&ours);
    uintptr_t a = (uintptr_t)p, hi = __atomic_load_n(&own_hi, __ATOMIC_ACQUIRE);
    if (!hi) { /* not found (cannot happen): ask the dynamic linker */
        Dl_info mine, theirs;
        return dladdr((void *)&ours, &mine) && dladdr(p, &theirs) && mine.dli_fbase == theirs.dli_fbase;
    }
    return a >= __atomic_load_n(&own_lo, __ATOMIC_RELAXED) && a < hi;
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
