/* Module and library globals: the device memory a loaded image declares for its global
 * variables.
 *
 * A cubin (an ELF image: what nvcc -cubin, a JIT or Triton hands to cuModuleLoadData)
 * declares its globals in sections: .nv.global (zero-filled), .nv.global.init
 * (initialised) and the user constant banks .nv.constant1..9 (not a kernel's parameter
 * bank, .nv.constant0.<kernel>).  The driver allocates them when it loads the module.
 * The shim reads the section headers, charges their total before the driver call (a
 * module that does not fit is refused with CUDA_ERROR_OUT_OF_MEMORY, as on a full GPU),
 * and credits it at unload or with the module's context.  From a fatbin (or the wrapper
 * libcudart 13 hands to cuLibraryLoadData: every kernel PyTorch, cuBLAS or vLLM launches
 * comes so) the driver loads the cubin for the device (cgpu_fatbin.h: the newest of the
 * device's major version no newer than it, LZ4 or zstd compressed or not), and the shim
 * charges that cubin's globals.  PTX (text handed to the load calls, a .ptx file, or a
 * fatbin's PTX entry where it has no cubin for the device) the driver compiles with ptxas:
 * the shim charges the globals its declarations make as ptxas lays them out (cgpu_ptx.h).
 * Not charged, and shown by the host view (NVML's per-process figure above the ledger): a
 * zstd entry where the process has no libzstd.so.1, and the constants the compiler adds
 * itself.  CUDA 12's runtime loads its modules through the driver's private table for it
 * rather than these calls: the shim points that table's three loaders at its own, which charge
 * alike (below).  Loads are not on the allocation hot path. */
#include "charge.h"

#include "cgpu_fatbin.h"
#include "cgpu_image.h"
#include "cgpu_ptx.h"

#include <elf.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The architecture (major * 10 + minor) of the current context's device, or of the first one
 * the process sees; 0 if the driver cannot say. */
static unsigned device_arch(void)
{
    int ordinal = 0, major = 0, minor = 0;
    if (!g_shim.ctx_get_device || g_shim.ctx_get_device(&ordinal) != 0)
        ordinal = 0;
    if (device_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ordinal) ||
        device_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ordinal) || major <= 0 || minor < 0 ||
        major > 99 || minor > 9)
        return 0;
    return (unsigned)(major * 10 + minor);
}

/* The globals of an image in memory (`len` bytes; 0: unknown, taken from its headers, or for
 * PTX text from its terminating NUL, as the driver reads it): those of what the driver loads
 * from it (cgpu_image.h: the simulator allocates the same).  The device is asked its
 * architecture only for a fatbin. */
static uint64_t image_globals(const void *image, uint64_t len)
{
    unsigned arch = cgpu_image_is_fatbin(image, (size_t)len) ? device_arch() : 0;
    struct cgpu_image loaded;
    uint64_t total = cgpu_image_globals(&loaded, cgpu_image_load(image, (size_t)len, arch, &loaded));
    free(loaded.owned);
    return total;
}

/* The globals of the cubin or fatbin in file `path`. */
static uint64_t file_globals(const char *path)
{
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0)
        return 0;
    unsigned char head[EI_NIDENT];
    struct stat st;
    uint64_t total = 0;
    unsigned char *img = NULL;
    if (pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head &&
        (!memcmp(head, ELFMAG, SELFMAG) || cgpu_fatbin_length(head) || cgpu_ptx_may_be_text(head)) &&
        fstat(fd, &st) == 0 && st.st_size > 0 && (uint64_t)st.st_size <= CGPU_IMAGE_MAX &&
        (img = malloc((size_t)st.st_size))) {
        size_t got = 0;
        ssize_t n;
        while (got < (size_t)st.st_size && (n = pread(fd, img + got, (size_t)st.st_size - got, (off_t)got)) > 0)
            got += (size_t)n;
        if (got == (size_t)st.st_size)
            total = image_globals(img, got);
    }
    free(img);
    close(fd);
    return total;
}

/* Charge `bytes` of globals, load, and remember the module by `key_of` its handle. */
#define LOADED(bytes_expr, call, handle_ptr, ctx_expr)                                                      \
    do {                                                                                                   \
        if (mode() != SHIM_LIMITED)                                                                        \
            return call;                                                                                   \
        uint64_t bytes_ = (bytes_expr);                                                                    \
        if (!bytes_)                                                                                       \
            return call;                                                                                   \
        CHARGED_ALLOC(current_device(), charge_of(bytes_), call,                                           \
                      PT_KIND_MODULE ^ (uint64_t)(uintptr_t)*(handle_ptr), (ctx_expr));                   \
    } while (0)

EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    LOADED(file_globals(fname), REAL(cuModuleLoad)(module, fname), module, current_context());
}

EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    LOADED(image_globals(image, 0), REAL(cuModuleLoadData)(module, image), module, current_context());
}

EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                   CUjit_option *options, void **optionValues)
{
    LOADED(image_globals(image, 0), REAL(cuModuleLoadDataEx)(module, image, numOptions, options, optionValues),
           module, current_context());
}

EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    LOADED(image_globals(fatCubin, 0), REAL(cuModuleLoadFatBinary)(module, fatCubin), module, current_context());
}

EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
    CHARGED_FREE(PT_KIND_MODULE ^ (uint64_t)(uintptr_t)hmod, REAL(cuModuleUnload)(hmod));
}

/* A library's globals outlive any one context: they go with the library. */
EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                  void **jitOptionsValues, unsigned int numJitOptions,
                                  CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                  unsigned int numLibraryOptions)
{
    LOADED(image_globals(code, 0),
           REAL(cuLibraryLoadData)(library, code, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                                   libraryOptionValues, numLibraryOptions),
           library, NULL);
}

EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                                      void **jitOptionsValues, unsigned int numJitOptions,
                                      CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                      unsigned int numLibraryOptions)
{
    LOADED(file_globals(fileName),
           REAL(cuLibraryLoadFromFile)(library, fileName, jitOptions, jitOptionsValues, numJitOptions,
                                       libraryOptions, libraryOptionValues, numLibraryOptions),
           library, NULL);
}

EXPORT CUresult cuLibraryUnload(CUlibrary library)
{
    CHARGED_FREE(PT_KIND_MODULE ^ (uint64_t)(uintptr_t)library, REAL(cuLibraryUnload)(library));
}

/* ---- the CUDA runtime's private loaders ----------------------------------------------------
 *
 * libcudart 11 (and every library linked with its static copy, as CUDA 11 builds of cuBLAS and
 * PyTorch are) loads the modules of its fat binaries through a table the driver gives it by
 * cuGetExportTable, not through cuModuleLoad*: slot 1 takes a fatbin wrapper, slot 6 a wrapper
 * and three more arguments, slot 8 a fatbin header first (the layout NVIDIA's runtime uses with
 * the simulator's table too, native/sim/cuda_export.c, and that ZLUDA documents and its tracer
 * overrides on NVIDIA's drivers).  libcudart 12.9 and 13 call cuLibraryLoadData instead
 * (measured with NVIDIA's 11.8, 12.9 and 13: tests/realstack/test_cudart_modules.py).  The
 * shim points those three slots of the driver's own table at loaders that charge the globals
 * first, as cuModuleLoadData does.  The table stays where it is: the runtime's integrity check
 * binds the driver's answer to the table's address, so a copy elsewhere fails it
 * (cudaErrorSoftwareValidityNotEstablished).  The slots are written through /proc/self/mem, as a
 * debugger writes a read-only page, once per process; where that is refused, the table is left
 * alone, one line says so, and those loads show only in the host view.  The extra arguments are
 * passed on as full registers. */

static const unsigned char CUDART_INTERFACE_ID[16] = {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
                                                      0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9};
#define CUDART_SLOTS_MAX 64 /* a table larger than this (its size is its first entry) is left alone */

typedef CUresult (*from_wrapper_fn)(CUmodule *, const void *);
typedef CUresult (*from_wrapper_ext_fn)(CUmodule *, const void *, void *, void *, uintptr_t);
typedef CUresult (*from_fatbin_fn)(const void *, CUmodule *, void *, void *, uintptr_t);

static struct {
    pthread_mutex_t lock;
    const void *const *table; /* the driver's table whose slots point here */
    from_wrapper_fn from_wrapper;
    from_wrapper_ext_fn from_wrapper_ext;
    from_fatbin_fn from_fatbin;
} g_cudart = {.lock = PTHREAD_MUTEX_INITIALIZER};

static CUresult cudart_from_wrapper(CUmodule *module, const void *wrapper)
{
    LOADED(image_globals(wrapper, 0), g_cudart.from_wrapper(module, wrapper), module, current_context());
}

static CUresult cudart_from_wrapper_ext(CUmodule *module, const void *wrapper, void *a3, void *a4, uintptr_t a5)
{
    LOADED(image_globals(wrapper, 0), g_cudart.from_wrapper_ext(module, wrapper, a3, a4, a5), module,
           current_context());
}

static CUresult cudart_from_fatbin(const void *fatbin, CUmodule *module, void *a3, void *a4, uintptr_t a5)
{
    LOADED(image_globals(fatbin, 0), g_cudart.from_fatbin(fatbin, module, a3, a4, a5), module,
           current_context());
}

/* Write `fn` into slot `index` of `table` (read-only memory of the driver's); 0 on success. */
static int cudart_patch(int fd, const void *const *table, size_t index, const void *fn)
{
    return pwrite(fd, &fn, sizeof fn, (off_t)(uintptr_t)&table[index]) == (ssize_t)sizeof fn ? 0 : -1;
}

/* Point slots 1, 6 and 8 of the driver's runtime table at the charging loaders (once). */
static void cudart_divert(const void *const *table)
{
    uintptr_t bytes = (uintptr_t)table[0];
    size_t n = bytes / sizeof(void *);
    if (bytes % sizeof(void *) || n < 2 || n > CUDART_SLOTS_MAX)
        return;
    pthread_mutex_lock(&g_cudart.lock);
    if (g_cudart.table) { /* done (or another table, which no driver hands out: left alone) */
        pthread_mutex_unlock(&g_cudart.lock);
        return;
    }
    const void *real1 = table[1], *real6 = n > 6 ? table[6] : NULL, *real8 = n > 8 ? table[8] : NULL;
    g_cudart.from_wrapper = (from_wrapper_fn)real1;
    g_cudart.from_wrapper_ext = (from_wrapper_ext_fn)real6;
    g_cudart.from_fatbin = (from_fatbin_fn)real8;
    int fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    int bad = fd < 0;
    if (!bad && real1)
        bad = cudart_patch(fd, table, 1, (const void *)cudart_from_wrapper);
    if (!bad && real6)
        bad = cudart_patch(fd, table, 6, (const void *)cudart_from_wrapper_ext);
    if (!bad && real8)
        bad = cudart_patch(fd, table, 8, (const void *)cudart_from_fatbin);
    if (bad && fd >= 0) { /* put back what was written */
        if (real1)
            cudart_patch(fd, table, 1, real1);
        if (real6)
            cudart_patch(fd, table, 6, real6);
        if (real8)
            cudart_patch(fd, table, 8, real8);
    }
    if (fd >= 0)
        close(fd);
    if (bad)
        fprintf(stderr, "cgpu: cannot charge the module globals the CUDA runtime loads through the driver's "
                        "private table (/proc/self/mem refused); the host view shows them\n");
    __atomic_store_n(&g_cudart.table, table, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_cudart.lock);
}

EXPORT CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
    CUresult rc = REAL(cuGetExportTable)(table, id);
    if (rc == CUDA_SUCCESS && table && *table && id && !memcmp(id, CUDART_INTERFACE_ID, sizeof CUDART_INTERFACE_ID)
        && !__atomic_load_n(&g_cudart.table, __ATOMIC_ACQUIRE) && mode() == SHIM_LIMITED)
        cudart_divert((const void *const *)*table);
    return rc;
}
