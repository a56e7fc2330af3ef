/* The simulated CUDA driver (libcuda.so.1).  Modules, libraries and their
 * functions: any image loads, and any name gives a function.  A function
 * named cgpu_sim_busy (or whose mangled name holds it) runs for the number of
 * nanoseconds in its first parameter; any other runs CGPU_SIM_KERNEL_NS. */
#include "cuda_sim.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

static CUresult module_new(CUmodule *out, int library, CUlibrary *lib_out)
{
    struct sim_ctx *c = NULL;
    if (!library) {
        CUresult rc = cur_ctx(&c);
        if (rc)
            return rc;
    } else if (!INITED()) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    LOCK();
    struct sim_module *m = obj_new(sizeof *m, O_MODULE, c);
    if (m)
        m->library = library;
    UNLOCK();
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (library)
        *lib_out = (CUlibrary)m;
    else
        *out = (CUmodule)m;
    return CUDA_SUCCESS;
}

CUresult module_load_image(CUmodule *out, const void *image)
{
    NEED_INIT();
    if (!out || !image)
        return CUDA_ERROR_INVALID_VALUE;
    return module_new(out, 0, NULL);
}

static int file_readable(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

SIM_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    NEED_INIT();
    if (!module || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    if (!file_readable(fname))
        return CUDA_ERROR_FILE_NOT_FOUND;
    return module_new(module, 0, NULL);
}

SIM_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    NEED_INIT();
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    return module_new(module, 0, NULL);
}

SIM_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                    CUjit_option *options, void **optionValues)
{
    return cuModuleLoadData(module, image);
}

SIM_API CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    return cuModuleLoadData(module, fatCubin);
}

/* drv.mu held. */
static void module_free(struct sim_module *m)
{
    for (struct sim_func *f = m->funcs, *next; f; f = next) {
        next = f->next;
        obj_free(f);
    }
    obj_free(m);
}

static CUresult module_unload(void *h, int library)
{
    NEED_INIT();
    LOCK();
    struct sim_module *m = obj_get(h, O_MODULE);
    CUresult rc = !m || m->library != library ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
    if (!rc)
        module_free(m);
    UNLOCK();
    return rc;
}

SIM_API CUresult cuModuleUnload(CUmodule hmod) { return module_unload(hmod, 0); }

/* The function `name` of module `h`, made on first request (drv.mu held). */
static CUresult func_get(void *h, int library, const char *name, struct sim_func **out)
{
    struct sim_module *m = obj_get(h, O_MODULE);
    if (!m || m->library != library)
        return CUDA_ERROR_INVALID_HANDLE;
    if (m->hdr.ctx && !atomic_load(&m->hdr.ctx->alive))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    for (struct sim_func *f = m->funcs; f; f = f->next)
        if (!strcmp(f->name, name)) {
            *out = f;
            return CUDA_SUCCESS;
        }
    size_t len = strlen(name);
    struct sim_func *f = obj_new(sizeof *f + len + 1, O_FUNC, m->hdr.ctx);
    if (!f)
        return CUDA_ERROR_OUT_OF_MEMORY;
    f->mod = m;
    memcpy(f->name, name, len + 1);
    f->busy = strstr(name, "cgpu_sim_busy") != NULL;
    f->max_dyn_smem = SIM_SMEM_PER_BLOCK;
    f->carveout = -1;
    f->next = m->funcs;
    m->funcs = f;
    *out = f;
    return CUDA_SUCCESS;
}

static CUresult get_function(void **out, void *h, int library, const char *name)
{
    NEED_INIT();
    if (!out || !name || !*name)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_func *f = NULL;
    CUresult rc = func_get(h, library, name, &f);
    UNLOCK();
    if (!rc)
        *out = f;
    return rc;
}

SIM_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    return get_function((void **)hfunc, hmod, 0, name);
}

static CUresult library_load(CUlibrary *library, const char *file, const void *code)
{
    NEED_INIT();
    if (!library || (!file && !code))
        return CUDA_ERROR_INVALID_VALUE;
    if (file && !file_readable(file))
        return CUDA_ERROR_FILE_NOT_FOUND;
    return module_new(NULL, 1, library);
}

SIM_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                   void **jitOptionsValues, unsigned int numJitOptions,
                                   CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                   unsigned int numLibraryOptions)
{
    return library_load(library, NULL, code);
}

SIM_API CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName,
                                       CUjit_option *jitOptions, void **jitOptionsValues,
                                       unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                                       void **libraryOptionValues, unsigned int numLibraryOptions)
{
    return library_load(library, fileName, NULL);
}

SIM_API CUresult cuLibraryUnload(CUlibrary library) { return module_unload(library, 1); }

SIM_API CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    return get_function((void **)pKernel, library, 1, name);
}

/* A kernel is its own function in every context (cuLaunchKernel takes either). */
SIM_API CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!pFunc)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_func *f = obj_get(kernel, O_FUNC);
    UNLOCK();
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    *pFunc = (CUfunction)f;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
    NEED_INIT();
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_func *f = obj_get(hfunc, O_FUNC);
    UNLOCK();
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    *name = f->name;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
    return cuFuncGetName(name, (CUfunction)hfunc);
}

/* CUDA_MODULE_LOADING, as the driver reads it: EAGER, or LAZY (the default
 * since CUDA 12.2; any other value is taken as the default too). */
SIM_API CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    NEED_INIT();
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    const char *e = getenv("CUDA_MODULE_LOADING");
    *mode = e && !strcmp(e, "EAGER") ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
    return CUDA_SUCCESS;
}
