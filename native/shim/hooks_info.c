/* What the program sees (cuMemGetInfo, cuDeviceTotalMem, NVML's memory info),
 * cuInit where a malformed limit fails closed, and the process's life (fork, exit). */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "charge.h"
#include "compute.h"

/* ---- what the program sees ------------------------------------------------------ */

/* Other processes may have been killed since we last looked: at most once a
 * millisecond, and only when others share the ledger, free their slots. */
static inline __attribute__((always_inline)) void sweep_if_shared(void)
{
    static uint64_t last_ms;
    struct ledger *l = g_shim.ledger.l;
    unsigned mine = __atomic_load_n(&g_shim.ledger.slot, __ATOMIC_RELAXED) >= 0;
    if (__atomic_load_n(&l->active, __ATOMIC_RELAXED) <= mine)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); /* vDSO: no syscall */
    uint64_t now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    if (__atomic_exchange_n(&last_ms, now, __ATOMIC_RELAXED) == now)
        return;
    ledger_try_sweep(&g_shim.ledger); /* never waits on another process */
}

/* free = min(slice - use, device free); total = slice. */
static inline __attribute__((always_inline)) void truncate_info(int dev, uint64_t *freep, uint64_t *totalp)
{
    sweep_if_shared();
    if (__atomic_load_n(&g_pool_kept[dev], __ATOMIC_RELAXED)) /* only this device's figure is asked */
        pool_reconcile();
    stack_reconcile(0);
    uint64_t limit = g_shim.ledger.limit[dev], used = ledger_view_used(&g_shim.ledger, (unsigned)dev);
    uint64_t left = used >= limit ? 0 : limit - used;
    *totalp = limit;
    if (*freep > left)
        *freep = left;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    CUresult rc = REAL(cuMemGetInfo_v2)(free, total);
    int dev;
    if (rc != CUDA_SUCCESS || mode() != SHIM_LIMITED || (dev = current_device()) < 0 || !free || !total)
        return rc;
    uint64_t f = *free, t = *total;
    truncate_info(dev, &f, &t);
    *free = (size_t)f;
    *total = (size_t)t;
    return rc;
}

EXPORT CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    CUresult rc = REAL(cuMemGetInfo)(free, total);
    int dev;
    if (rc != CUDA_SUCCESS || mode() != SHIM_LIMITED || (dev = current_device()) < 0 || !free || !total)
        return rc;
    uint64_t f = *free, t = *total;
    truncate_info(dev, &f, &t);
    *free = f > 0xFFFFFFFFu ? 0xFFFFFFFFu : (unsigned)f;
    *total = t > 0xFFFFFFFFu ? 0xFFFFFFFFu : (unsigned)t;
    return rc;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult rc = REAL(cuDeviceTotalMem_v2)(bytes, dev);
    int d;
    if (rc == CUDA_SUCCESS && bytes && mode() == SHIM_LIMITED && (d = device_of_ordinal(dev)) >= 0)
        *bytes = (size_t)g_shim.ledger.limit[d];
    return rc;
}

EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    CUresult rc = REAL(cuDeviceTotalMem)(bytes, dev);
    int d;
    if (rc == CUDA_SUCCESS && bytes && mode() == SHIM_LIMITED && (d = device_of_ordinal(dev)) >= 0) {
        uint64_t limit = g_shim.ledger.limit[d];
        *bytes = limit > 0xFFFFFFFFu ? 0xFFFFFFFFu : (unsigned)limit;
    }
    return rc;
}

/* cuInit is where a malformed limit fails closed. */
EXPORT CUresult cuInit(unsigned int Flags)
{
    CUresult rc = REAL(cuInit)(Flags);
    if (rc != CUDA_SUCCESS)
        return rc;
    return shim_cuda_init(1) == SHIM_FAILED ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ---- NVML: what nvidia-smi in the container shows ------------------------------ */

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    nvmlReturn_t (*real)(nvmlDevice_t, nvmlMemory_t *) = (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))real_fn(H_nvmlDeviceGetMemoryInfo);
    if (!real)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t rc = real(device, memory);
    if (rc != NVML_SUCCESS || !memory)
        return rc;
    uint64_t limit, used;
    switch (shim_nvml_view(device, &limit, &used)) {
    case SHIM_FAILED:
        return NVML_ERROR_UNKNOWN;
    case SHIM_LIMITED:
        memory->total = limit;
        memory->used = used;
        memory->free = used >= limit ? 0 : limit - used;
        break;
    default:
        break;
    }
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    nvmlReturn_t (*real)(nvmlDevice_t, nvmlMemory_v2_t *) =
        (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_v2_t *))real_fn(H_nvmlDeviceGetMemoryInfo_v2);
    if (!real)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t rc = real(device, memory);
    if (rc != NVML_SUCCESS || !memory)
        return rc;
    uint64_t limit, used;
    switch (shim_nvml_view(device, &limit, &used)) {
    case SHIM_FAILED:
        return NVML_ERROR_UNKNOWN;
    case SHIM_LIMITED:
        memory->total = limit;
        memory->reserved = 0;
        memory->used = used;
        memory->free = used >= limit ? 0 : limit - used;
        break;
    default:
        break;
    }
    return rc;
}

/* ---- fork ----------------------------------------------------------------------------- */

/* A child owns none of its parent's device memory (CUDA forbids it from using
 * the parent's context), so it starts from nothing and claims its own slot. */
static void after_fork_child(void)
{
    pt_reset(&g_table);
    memset(g_pool_kept, 0, sizeof g_pool_kept);
    shim_forget_process();
    compute_forget_process();
}

/* A clean exit gives the slot back at once; a killed process is swept later. */
__attribute__((destructor)) static void shim_destructor(void)
{
    if (__atomic_load_n(&g_shim.state, __ATOMIC_ACQUIRE) == SHIM_LIMITED)
        ledger_release_slot(&g_shim.ledger);
}

__attribute__((constructor)) static void shim_constructor(void)
{
    /* Nothing that touches the driver: every process of the container loads us. */
    pthread_atfork(NULL, NULL, after_fork_child);
}
