/* The simulated CUDA driver (libcuda.so.1).  Modules, libraries and their
 * functions: any image loads, and any name gives a function.  A function
 * named cgpu_sim_busy (or whose mangled name holds it) runs for the number of
 * nanoseconds in its first parameter; any other runs CGPU_SIM_KERNEL_NS.
 *
 * Globals: a cubin (an ELF image, as nvcc -cubin or a JIT writes it) declares its
 * global variables in sections: .nv.global (zero-filled), .nv.global.init (with
 * initial values) and the user constant banks .nv.constant1.. (not .nv.constant0.*,
 * each kernel's parameter bank).  Loading it allocates them, all together, as device
 * memory of the current context's device, charged like any allocation (in whole pages
 * of the granularity) and freed with the module or its context; a load it does not fit
 * in fails with CUDA_ERROR_OUT_OF_MEMORY.  cuModuleGetGlobal and cuLibraryGetGlobal
 * find a variable by its symbol.  A fatbin's globals are those of its cubin for this
 * device (cgpu_fatbin_load, LZ4 or zstd compressed or not); a fatbin wrapper's (__fatBinC_Wrapper_t, what the CUDA runtime
 * loads: through the private tables, cuda_export.c, and from CUDA 13 through
 * cuLibraryLoadData) those of the fatbin it points to.  PTX (text, a .ptx file, or a fatbin's
 * PTX entry where it has no sm_9x cubin) is compiled by a real driver: its globals are those
 * ptxas lays out (cgpu_ptx.h). */
#include "cuda_sim.h"

#include "cgpu_image.h"
#include "cgpu_ptx.h"

#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

struct sim_global {
    unsigned long long off, size; /* within the module's globals */
    char name[64];
};

/* The globals of ELF image `img` (`len` bytes): their total size with each section aligned
 * (cgpu_image.h, by which the shim charges them), and their symbols (malloc'd; *nsyms of
 * them).  0 for an image that is not a 64-bit ELF or declares none; -1 for a malformed one. */
static int image_globals(const unsigned char *img, size_t len, unsigned long long *total,
                         struct sim_global **syms, size_t *nsyms)
{
    *total = 0;
    *syms = NULL;
    *nsyms = 0;
    if (len < sizeof(Elf64_Ehdr) || memcmp(img, ELFMAG, SELFMAG) || img[EI_CLASS] != ELFCLASS64)
        return 0;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
    uint64_t sum = 0, *at = calloc(eh->e_shnum ? eh->e_shnum : 1, sizeof *at);
    if (!at)
        return -1;
    if (cgpu_cubin_globals(img, len, &sum, at, eh->e_shnum)) {
        free(at);
        return -1;
    }
    *total = sum;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(img + eh->e_shoff);
    const Elf64_Shdr *symtab = NULL;
    for (unsigned i = 0; i < eh->e_shnum; i++)
        if (sh[i].sh_type == SHT_SYMTAB)
            symtab = &sh[i];
    /* The variables: symbols defined in those sections. */
    if (symtab && symtab->sh_link < eh->e_shnum && symtab->sh_offset <= len &&
        symtab->sh_size <= len - symtab->sh_offset && symtab->sh_entsize == sizeof(Elf64_Sym)) {
        const Elf64_Shdr *str = &sh[symtab->sh_link];
        size_t n = symtab->sh_size / sizeof(Elf64_Sym);
        const Elf64_Sym *sym = (const Elf64_Sym *)(img + symtab->sh_offset);
        *syms = calloc(n ? n : 1, sizeof **syms);
        for (size_t i = 0; *syms && i < n && str->sh_offset <= len && str->sh_size <= len - str->sh_offset; i++) {
            if (sym[i].st_shndx >= eh->e_shnum || at[sym[i].st_shndx] == ~0ULL || sym[i].st_name >= str->sh_size)
                continue;
            const char *nm = (const char *)img + str->sh_offset + sym[i].st_name;
            size_t nlen = strnlen(nm, str->sh_size - sym[i].st_name);
            if (nlen == str->sh_size - sym[i].st_name || nlen >= sizeof(*syms)->name || !nlen)
                continue;
            struct sim_global *g = &(*syms)[(*nsyms)++];
            g->off = at[sym[i].st_shndx] + sym[i].st_value;
            g->size = sym[i].st_size;
            memcpy(g->name, nm, nlen + 1);
        }
    }
    free(at);
    return 0;
}

/* What each kernel of ELF image `img` (`len` bytes) needs of the stack, from its .nv.info
 * section: records of a format byte, an attribute byte, then (format 4) a 16-bit size and that
 * many bytes, else a 16-bit value.  EIATTR_FRAME_SIZE (0x11) and EIATTR_MIN_STACK_SIZE (0x12)
 * hold a symbol index and a size: the kernel's stack frame (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)
 * and the per-thread stack a launch needs, its calls included (as ptxas -v prints them).
 * malloc'd into *out (*n of them); nothing for an image that is not a cubin. */
#define EIATTR_FRAME_SIZE 0x11
#define EIATTR_MIN_STACK_SIZE 0x12

static void kernel_stacks(const unsigned char *img, size_t len, struct sim_kernel_stack **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (len < sizeof(Elf64_Ehdr) || memcmp(img, ELFMAG, SELFMAG) || img[EI_CLASS] != ELFCLASS64)
        return;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
    if (eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > len ||
        (len - eh->e_shoff) / sizeof(Elf64_Shdr) < eh->e_shnum || eh->e_shstrndx >= eh->e_shnum)
        return;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(img + eh->e_shoff), *names = &sh[eh->e_shstrndx];
    const Elf64_Shdr *info = NULL, *symtab = NULL;
    if (names->sh_offset > len || names->sh_size > len - names->sh_offset)
        return;
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type == SHT_SYMTAB)
            symtab = &sh[i];
        if (sh[i].sh_name < names->sh_size &&
            !strncmp((const char *)img + names->sh_offset + sh[i].sh_name, ".nv.info",
                     names->sh_size - sh[i].sh_name) &&
            sh[i].sh_name + 9 <= names->sh_size)
            info = &sh[i];
    }
    if (!info || !symtab || info->sh_offset > len || info->sh_size > len - info->sh_offset ||
        symtab->sh_offset > len || symtab->sh_size > len - symtab->sh_offset ||
        symtab->sh_entsize != sizeof(Elf64_Sym) || symtab->sh_link >= eh->e_shnum)
        return;
    const Elf64_Shdr *str = &sh[symtab->sh_link];
    if (str->sh_offset > len || str->sh_size > len - str->sh_offset)
        return;
    const Elf64_Sym *sym = (const Elf64_Sym *)(img + symtab->sh_offset);
    size_t nsym = symtab->sh_size / sizeof(Elf64_Sym);
    const unsigned char *p = img + info->sh_offset, *end = p + info->sh_size;
    while (end - p >= 4) {
        unsigned fmt = p[0], attr = p[1], size = (unsigned)p[2] | (unsigned)p[3] << 8;
        const unsigned char *body = p + 4;
        p += 4;
        if (fmt == 4) {
            if ((size_t)(end - body) < size)
                break;
            p += size;
        }
        if (fmt != 4 || size < 8 || (attr != EIATTR_FRAME_SIZE && attr != EIATTR_MIN_STACK_SIZE))
            continue;
        uint32_t index, value;
        memcpy(&index, body, 4);
        memcpy(&value, body + 4, 4);
        if (index >= nsym || sym[index].st_name >= str->sh_size)
            continue;
        const char *name = (const char *)img + str->sh_offset + sym[index].st_name;
        size_t name_len = strnlen(name, str->sh_size - sym[index].st_name);
        if (name_len == str->sh_size - sym[index].st_name || !name_len)
            continue;
        struct sim_kernel_stack *k = NULL;
        for (size_t i = 0; i < *n; i++)
            if (!strcmp((*out)[i].name, name))
                k = &(*out)[i];
        if (!k) {
            struct sim_kernel_stack *grown = realloc(*out, (*n + 1) * sizeof **out);
            char *copy = grown ? strndup(name, name_len) : NULL;
            if (!copy) {
                if (grown)
                    *out = grown;
                break;
            }
            *out = grown;
            k = &(*out)[(*n)++];
            k->name = copy;
            k->frame = k->stack = 0;
        }
        if (attr == EIATTR_FRAME_SIZE)
            k->frame = value;
        else
            k->stack = value;
    }
}

static void kernel_stacks_free(struct sim_kernel_stack *stacks, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(stacks[i].name);
    free(stacks);
}

/* The PTX module's globals (`len` bytes of text): laid out as ptxas lays them out
 * (cgpu_ptx.h, shared with the shim, which charges the same total), with their symbols. */
static void ptx_globals(const char *text, size_t len, unsigned long long *total, struct sim_global **syms,
                        size_t *nsyms)
{
    *total = 0;
    *syms = NULL;
    *nsyms = 0;
    struct cgpu_ptx_info info;
    size_t n = cgpu_ptx_vars(text, len, NULL, 0, &info);
    struct cgpu_ptx_var *vars = n || info.extern_funcs ? malloc((n ? n : 1) * sizeof *vars) : NULL;
    if (!vars)
        return;
    n = cgpu_ptx_vars(text, len, vars, n, &info);
    *total = cgpu_ptx_layout(vars, n, &info);
    *syms = calloc(n ? n : 1, sizeof **syms);
    for (size_t i = 0; *syms && i < n; i++) {
        if (!vars[i].name_len || vars[i].name_len >= sizeof(*syms)->name)
            continue;
        struct sim_global *g = &(*syms)[(*nsyms)++];
        g->off = vars[i].offset;
        g->size = vars[i].size;
        memcpy(g->name, vars[i].name, vars[i].name_len);
        g->name[vars[i].name_len] = 0;
    }
    free(vars);
}

/* What the driver loads from a fatbin (cgpu_fatbin.h, shared with the shim, which charges the
 * same globals): this device is sm_90, so an sm_90 cubin, else the newest sm_9x below it, else
 * the PTX of the newest architecture up to sm_90, compiled; LZ4 and zstd payloads decoded
 * (zstd through the system's libzstd.so.1: without it such an entry declares nothing). */
#define SIM_ARCH 90u

/* A new module or library from `image` (`len` bytes; 0: an image in memory whose length
 * its headers give). */
static CUresult module_new(CUmodule *out, int library, CUlibrary *lib_out, const void *image, size_t len)
{
    struct sim_ctx *c = NULL;
    if (!library) {
        CUresult rc = cur_ctx(&c);
        if (rc)
            return rc;
    } else if (!INITED()) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    unsigned long long total = 0;
    struct sim_global *syms = NULL;
    size_t nsyms = 0;
    struct cgpu_image loaded;
    enum cgpu_image_kind kind = cgpu_image_load(image, len, SIM_ARCH, &loaded);
    if (kind == CGPU_IMAGE_INVALID) /* a wrapper of another version */
        return CUDA_ERROR_INVALID_IMAGE;
    int bad = 0;
    struct sim_kernel_stack *stacks = NULL;
    size_t nstacks = 0;
    if (kind == CGPU_IMAGE_PTX)
        ptx_globals((const char *)loaded.data, loaded.len, &total, &syms, &nsyms);
    else if (kind == CGPU_IMAGE_CUBIN && loaded.data)
        bad = image_globals(loaded.data, loaded.len, &total, &syms, &nsyms);
    if (kind == CGPU_IMAGE_CUBIN && loaded.data && !bad)
        kernel_stacks(loaded.data, loaded.len, &stacks, &nstacks);
    free(loaded.owned);
    if (bad)
        return CUDA_ERROR_INVALID_IMAGE;
    /* A library's globals go to the current context's device (the driver loads a
     * library into the contexts that use it).  cuLibraryLoadData needs no current context:
     * with CUDA's lazy loading, libcudart loads a kernel's library on the first launch, on
     * whatever thread makes it (autograd's engine thread, say), which may never have made a
     * context current itself.  Without one, the globals go to the first device. */
    struct sim_ctx *home = c;
    int phys = 0;
    if (total)
        phys = home || cur_ctx(&home) == CUDA_SUCCESS ? home->phys : dev_phys(0);
    LOCK();
    CUdeviceptr globals = 0;
    CUresult rc = total ? mem_alloc_locked(c, phys, total, 0, 0, NULL, &globals) : CUDA_SUCCESS;
    struct sim_module *m = rc ? NULL : obj_new(sizeof *m, O_MODULE, c);
    if (m) {
        m->library = library;
        m->globals = globals;
        m->syms = syms;
        m->nsyms = nsyms;
        m->stacks = stacks;
        m->nstacks = nstacks;
    } else if (!rc) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc && globals)
        region_free(live_exact(globals));
    UNLOCK();
    if (rc) {
        free(syms);
        kernel_stacks_free(stacks, nstacks);
        return rc;
    }
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
    return module_new(out, 0, NULL, image, 0);
}

/* The contents of file `path` (malloc'd, *len bytes), or NULL. */
static unsigned char *file_read(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    unsigned char *buf = NULL;
    if (fstat(fd, &st) == 0 && st.st_size >= 0 && (buf = malloc((size_t)st.st_size + 1))) {
        size_t got = 0;
        ssize_t n;
        while (got < (size_t)st.st_size && (n = read(fd, buf + got, (size_t)st.st_size - got)) > 0)
            got += (size_t)n;
        *len = got;
    }
    close(fd);
    return buf;
}

static CUresult load_file(CUmodule *module, int library, CUlibrary *lib_out, const char *fname)
{
    size_t len = 0;
    unsigned char *img = file_read(fname, &len);
    if (!img)
        return CUDA_ERROR_FILE_NOT_FOUND;
    CUresult rc = module_new(module, library, lib_out, img, len);
    free(img);
    return rc;
}

SIM_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    NEED_INIT();
    if (!module || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    return load_file(module, 0, NULL, fname);
}

SIM_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    NEED_INIT();
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    return module_new(module, 0, NULL, image, 0);
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
    if (m->view)
        module_free(m->view);
    if (m->owner) { /* a library's module: its globals are the library's */
        obj_free(m);
        return;
    }
    struct region *r = m->globals ? live_exact(m->globals) : NULL;
    if (r) /* else its context freed it */
        region_free(r);
    free(m->syms);
    kernel_stacks_free(m->stacks, m->nstacks);
    obj_free(m);
}

static CUresult module_unload(void *h, int library)
{
    NEED_INIT();
    LOCK();
    struct sim_module *m = obj_get(h, O_MODULE);
    CUresult rc = !m || m->library != library || m->owner ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
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
    const struct sim_module *home = m->owner ? m->owner : m; /* a library's module: the library's */
    for (size_t i = 0; i < home->nstacks; i++)
        if (!strcmp(home->stacks[i].name, name)) {
            f->frame = home->stacks[i].frame;
            f->stack = home->stacks[i].stack;
        }
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
    if (file)
        return load_file(NULL, 1, library, file);
    return module_new(NULL, 1, library, code, 0);
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

/* A library's module (what CUDA 12's runtime launches a registered kernel from): one per library,
 * sharing its globals, living and dying with it (cuModuleUnload refuses it). */
SIM_API CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!pMod)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_module *lib = obj_get(library, O_MODULE);
    rc = !lib || !lib->library ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
    if (!rc && !lib->view) {
        struct sim_module *v = obj_new(sizeof *v, O_MODULE, NULL);
        if (v) {
            v->globals = lib->globals;
            v->syms = lib->syms;
            v->nsyms = lib->nsyms;
            v->owner = lib;
            lib->view = v;
        } else {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (!rc)
        *pMod = (CUmodule)lib->view;
    UNLOCK();
    return rc;
}

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

/* The global `name` of module or library `h`. */
static CUresult get_global(unsigned long long *dptr, size_t *bytes, void *h, int library, const char *name)
{
    NEED_INIT();
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_module *m = obj_get(h, O_MODULE);
    CUresult rc = !m || m->library != library ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_NOT_FOUND;
    for (size_t i = 0; m && m->library == library && i < m->nsyms; i++)
        if (!strcmp(m->syms[i].name, name)) {
            if (dptr)
                *dptr = m->globals + m->syms[i].off;
            if (bytes)
                *bytes = m->syms[i].size;
            rc = CUDA_SUCCESS;
            break;
        }
    UNLOCK();
    return rc;
}

SIM_API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
    unsigned long long p = 0;
    CUresult rc = get_global(&p, bytes, hmod, 0, name);
    if (!rc && dptr)
        *dptr = p;
    return rc;
}

/* The 32-bit form: globals live above 4 GiB, where it cannot point. */
SIM_API CUresult cuModuleGetGlobal(CUdeviceptr_v1 *dptr, unsigned int *bytes, CUmodule hmod, const char *name)
{
    unsigned long long p = 0;
    size_t n = 0;
    CUresult rc = get_global(&p, &n, hmod, 0, name);
    if (!rc && (p > UINT_MAX || n > UINT_MAX))
        return CUDA_ERROR_NOT_SUPPORTED;
    if (!rc && dptr)
        *dptr = (CUdeviceptr_v1)p;
    if (!rc && bytes)
        *bytes = (unsigned int)n;
    return rc;
}

SIM_API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
    unsigned long long p = 0;
    CUresult rc = get_global(&p, bytes, library, 1, name);
    if (!rc && dptr)
        *dptr = p;
    return rc;
}
