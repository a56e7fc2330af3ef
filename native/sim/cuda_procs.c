/* The simulated CUDA driver (libcuda.so.1). Entry-point lookup:
 * cuGetProcAddress(_v2) and the error strings (cuGetExportTable: cuda_export.c). */
#include "cuda_sim.h"

#include <dlfcn.h>
#include <stdio.h>

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

static const struct {
    int code;
    const char *name, *text;
} errtab[] = {
#define SIM_ERR(c, n, t) {c, n, t},
#include "sim_errors.inc"
#undef SIM_ERR
};

SIM_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errtab / sizeof *errtab; i++)
        if (errtab[i].code == (int)error) {
            *pStr = errtab[i].text;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errtab / sizeof *errtab; i++)
        if (errtab[i].code == (int)error) {
            *pStr = errtab[i].name;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------------ */
/* cuGetProcAddress                                                          */

/* Declarations of the stubs the headers do not declare (the interop ones). */
#define SIM_STUB(name, params)
#define SIM_STUB_UNTYPED(name) CUresult name(void);
#include "sim_stubs.inc"
#undef SIM_STUB
#undef SIM_STUB_UNTYPED

CUresult sim_unmodelled(const char *name)
{
    if (trace_on())
        fprintf(stderr, "cgpu-sim: %s: not modelled\n", name);
    return INITED() ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_NOT_INITIALIZED;
}

static const struct proc {
    const char *name;
    void *fn;
    int version;
    int per_thread;
} procs[] = {
#define SIM_PROC(n, f, v, p) {n, (void *)f, v, p},
#include "sim_procs.inc"
#undef SIM_PROC
};

int trace_on(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv(CGPU_ENV_SIM_TRACE);
        on = e && *e && strcmp(e, "0") != 0;
    }
    return on;
}

static CUresult get_proc_traced(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *status);

static CUresult get_proc(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status)
{
    CUresult rc = get_proc_traced(symbol, pfn, cudaVersion, flags, status);
    if (trace_on()) {
        Dl_info info;
        const char *name = rc == CUDA_SUCCESS && dladdr(*pfn, &info) && info.dli_sname
                               ? info.dli_sname : "-";
        fprintf(stderr, "cgpu-sim: cuGetProcAddress(\"%s\", %d, %llu) = %d %s\n",
                symbol ? symbol : "(null)", cudaVersion, (unsigned long long)flags, (int)rc, name);
    }
    return rc;
}

static CUresult get_proc_traced(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                              CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    const struct proc *plain = NULL, *pt = NULL;
    int found = 0;
    for (size_t i = 0; i < sizeof procs / sizeof *procs; i++) {
        const struct proc *p = &procs[i];
        if (strcmp(p->name, symbol))
            continue;
        found = 1;
        if (p->version > cudaVersion)
            continue;
        if (p->per_thread) {
            if (!pt || p->version > pt->version)
                pt = p;
        } else if (!plain || p->version > plain->version) {
            plain = p;
        }
    }
    const struct proc *chosen =
        (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && pt ? pt : plain;
    if (!chosen) {
        if (status)
            *status = found ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = chosen->fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    return get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}

SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return get_proc(symbol, pfn, cudaVersion, flags, NULL);
}

/* ------------------------------------------------------------------------ */
/* Driver logs: callbacks are registered and unregistered; the simulator      */
/* writes no log entries, so they are never called.                          */

#define LOG_CALLBACKS 64

static struct CUlogsCallbackEntry_st {
    CUlogsCallback fn;
    void *data;
} log_callbacks[LOG_CALLBACKS];
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

SIM_API CUresult cuLogsRegisterCallback(CUlogsCallback callbackFunc, void *userData,
                                        CUlogsCallbackHandle *callback_out)
{
    NEED_INIT();
    if (!callbackFunc)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&log_mu);
    for (int i = 0; i < LOG_CALLBACKS; i++)
        if (!log_callbacks[i].fn) {
            log_callbacks[i].fn = callbackFunc;
            log_callbacks[i].data = userData;
            if (callback_out)
                *callback_out = &log_callbacks[i];
            rc = CUDA_SUCCESS;
            break;
        }
    pthread_mutex_unlock(&log_mu);
    return rc;
}

SIM_API CUresult cuLogsUnregisterCallback(CUlogsCallbackHandle callback)
{
    NEED_INIT();
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&log_mu);
    for (int i = 0; i < LOG_CALLBACKS; i++)
        if (callback == &log_callbacks[i] && log_callbacks[i].fn) {
            log_callbacks[i].fn = NULL;
            rc = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&log_mu);
    return rc;
}
