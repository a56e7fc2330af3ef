/* Charging, the parts off the hot path (see charge.h). */
#include "charge.h"
#include "resolve.h"

#include "cgpu_sizes.h"

#include <pthread.h>
#include <stdio.h>

struct ptrtable g_table __attribute__((aligned(64)));

static void report_oom(int dev, uint64_t bytes)
{
    struct ledger *l = g_shim.ledger.l;
    fprintf(stderr,
            "cgpu: out of GPU memory slice on %s: requested %llu bytes, %llu of %llu in use (CUDA_ERROR_OUT_OF_MEMORY)\n",
            l->devices[dev].uuid, (unsigned long long)bytes, (unsigned long long)ledger_used(l, (unsigned)dev),
            (unsigned long long)g_shim.ledger.limit[dev]);
}

CUresult charge_reserve_slow(int dev, uint64_t charge)
{
    /* Free what dead processes held, and what pools gave back, then try once more; and count
     * the stack a launch grew, so that the refusal is right. */
    if (ledger_sweep(&g_shim.ledger) > 0 && ledger_charge(&g_shim.ledger, (unsigned)dev, charge, 0) == CGPU_OK)
        return CUDA_SUCCESS;
    stack_reconcile(1);
    if (pool_reconcile() && ledger_charge(&g_shim.ledger, (unsigned)dev, charge, 0) == CGPU_OK)
        return CUDA_SUCCESS;
    report_oom(dev, charge);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

void credit_locked(uint64_t key, unsigned dev, uint64_t charge)
{
    (void)key;
    ledger_credit_locked(&g_shim.ledger, dev, charge);
}

/* ---- what stream-ordered pools keep (see charge.h) ------------------------------ */

uint64_t g_pool_kept[CGPU_MAX_DEVICES];

#define SEEN_POOLS 32
static CUmemoryPool seen[SEEN_POOLS];

void pool_seen(CUmemoryPool pool)
{
    if (!pool)
        return;
    for (int i = 0; i < SEEN_POOLS; i++) {
        CUmemoryPool cur = __atomic_load_n(&seen[i], __ATOMIC_RELAXED);
        if (cur == pool)
            return;
        if (!cur && __atomic_compare_exchange_n(&seen[i], &cur, pool, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return;
        if (cur == pool)
            return;
    }
}

void pool_forget(CUmemoryPool pool)
{
    for (int i = 0; pool && i < SEEN_POOLS; i++) {
        CUmemoryPool cur = pool;
        if (__atomic_compare_exchange_n(&seen[i], &cur, NULL, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return;
    }
}

typedef CUresult (*pool_attr_fn)(CUmemoryPool, CUmemPool_attribute, void *);
typedef CUresult (*dev_pool_fn)(CUmemoryPool *, CUdevice);

/* What `pool` keeps freed: reserved - used.  0 when the driver cannot say. */
static uint64_t pool_keeps(pool_attr_fn attr, CUmemoryPool pool)
{
    cuuint64_t reserved = 0, used = 0;
    if (!pool || attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS ||
        attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) != CUDA_SUCCESS)
        return 0;
    return reserved > used ? reserved - used : 0;
}

/* The known pools of the device with `ordinal`: its default and current pool, and
 * every pool allocated from that lives there. */
static uint64_t device_keeps(int ordinal, pool_attr_fn attr, dev_pool_fn dflt, dev_pool_fn cur)
{
    CUmemoryPool pools[SEEN_POOLS + 2] = {0};
    int n = 0;
    if (dflt && dflt(&pools[n], ordinal) == CUDA_SUCCESS)
        n++;
    if (cur && cur(&pools[n], ordinal) == CUDA_SUCCESS && (n == 0 || pools[n] != pools[0]))
        n++;
    CUresult (*access)(CUmemAccess_flags *, CUmemoryPool, CUmemLocation *) =
        (CUresult(*)(CUmemAccess_flags *, CUmemoryPool, CUmemLocation *))shim_driver_sym("cuMemPoolGetAccess");
    for (int i = 0; i < SEEN_POOLS; i++) {
        CUmemoryPool p = __atomic_load_n(&seen[i], __ATOMIC_RELAXED);
        if (!p || (n > 0 && p == pools[0]) || (n > 1 && p == pools[1]))
            continue;
        /* A pool's own device has read-write access to it. */
        CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = ordinal};
        CUmemAccess_flags fl = CU_MEM_ACCESS_FLAGS_PROT_NONE;
        if (g_shim.single_device != SHIM_MULTI_DEVICE ||
            (access && access(&fl, p, &loc) == CUDA_SUCCESS && fl == CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
            pools[n++] = p;
    }
    uint64_t keeps = 0;
    for (int i = 0; i < n; i++)
        keeps += pool_keeps(attr, pools[i]);
    return keeps;
}

int pool_reconcile(void)
{
    int any = 0;
    for (int d = 0; d < CGPU_MAX_DEVICES; d++)
        any |= __atomic_load_n(&g_pool_kept[d], __ATOMIC_RELAXED) != 0;
    if (!any)
        return 0;
    pool_attr_fn attr = (pool_attr_fn)shim_driver_sym("cuMemPoolGetAttribute");
    dev_pool_fn dflt = (dev_pool_fn)shim_driver_sym("cuDeviceGetDefaultMemPool");
    dev_pool_fn cur = (dev_pool_fn)shim_driver_sym("cuDeviceGetMemPool");
    CUresult (*count_fn)(int *) = (CUresult(*)(int *))shim_driver_sym("cuDeviceGetCount");
    int count = 0;
    if (!attr || !count_fn || count_fn(&count) != CUDA_SUCCESS)
        return 0;
    int credited = 0;
    for (int ordinal = 0; ordinal < count && ordinal < SHIM_MAX_ORDINALS; ordinal++) {
        int dev = device_of_ordinal(ordinal);
        if (dev < 0)
            continue;
        uint64_t kept = __atomic_load_n(&g_pool_kept[dev], __ATOMIC_RELAXED);
        if (!kept)
            continue;
        uint64_t keeps = device_keeps(ordinal, attr, dflt, cur);
        /* A free that lands meanwhile makes the exchange fail: credited later. */
        if (keeps < kept &&
            __atomic_compare_exchange_n(&g_pool_kept[dev], &kept, keeps, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            unreserve(dev, kept - keeps);
            credited = 1;
        }
    }
    return credited;
}

/* ---- the per-context heaps: their sizes (cuCtxSetLimit, hooks_ctx.c), and the stack a launch
 * grows ---------------------------------------------------------------------------------- */

pthread_mutex_t g_heaps_lock = PTHREAD_MUTEX_INITIALIZER;

/* The heaps' sizes are the simulator's too (cgpu_sizes.h), in 2 MiB pages; the stack is reserved
 * for every thread the device holds at once. */
uint64_t heap_beyond_default(CUlimit limit, uint64_t value, CUdevice ordinal)
{
    uint64_t resident = 0;
    if (limit == CU_LIMIT_STACK_SIZE) {
        int sms = 0, threads = 0;
        if (device_attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ordinal) ||
            device_attribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, ordinal) ||
            sms <= 0 || threads <= 0)
            return 0; /* cannot tell: the host view shows it (NVML against the ledger) */
        resident = (uint64_t)sms * (uint64_t)threads;
    }
    return cgpu_heap_beyond_default(limit, value, resident, 2 * MiB);
}

/* The stack a launch grew.  The driver "automatically increases the per-thread stack size for
 * each kernel launch as needed" and keeps it (cuda.h, CU_LIMIT_STACK_SIZE): a kernel with an
 * 8000-byte frame takes another 1.8 GiB on an H100, inside the driver's launch, which the shim
 * does not intercept (without a compute limit it hands out the driver's own launch functions).
 * So the shim charges it once it shows in the context's stack limit: when the program asks
 * what is free (cuMemGetInfo: vLLM sizes its cache so) and before an allocation is refused.
 * That charge is forced (the memory is taken already); allocations after it are held to the
 * slice with the stack counted.  The launch that grew it is not refused: the host view
 * (NVML's figure above the slice) shows a container whose stack took it past its slice. */
void stack_reconcile(int may_wait)
{
    typedef CUresult (*get_limit_fn)(size_t *, CUlimit);
    static get_limit_fn resolved;
    static void *seen_ctx;     /* under g_heaps_lock */
    static size_t seen_value;  /* under g_heaps_lock */
    static int looked; /* resolved once, found or not: a driver without it is asked nothing */
    get_limit_fn get_limit = __atomic_load_n(&resolved, __ATOMIC_RELAXED);
    if (!get_limit && !__atomic_load_n(&looked, __ATOMIC_RELAXED)) {
        get_limit = (get_limit_fn)shim_driver_sym("cuCtxGetLimit");
        __atomic_store_n(&resolved, get_limit, __ATOMIC_RELAXED);
        __atomic_store_n(&looked, 1, __ATOMIC_RELAXED);
    }
    void *ctx = current_context();
    int ordinal = -1;
    size_t value = 0;
    if (!get_limit || !ctx || !g_shim.ctx_get_device || g_shim.ctx_get_device(&ordinal) != 0 ||
        device_of_ordinal(ordinal) < 0 || get_limit(&value, CU_LIMIT_STACK_SIZE) != CUDA_SUCCESS)
        return;
    if (value <= CGPU_STACK_DEFAULT) /* the default stack: nothing grew (it only grows) */
        return;
    int dev = device_of_ordinal(ordinal);
    uint64_t want = heap_beyond_default(CU_LIMIT_STACK_SIZE, value, ordinal);
    if (!want || !have_slot())
        return;
    /* Busy: a cuCtxSetLimit is under way (perhaps this thread's own, whose reservation found
     * the slice full and came here): it sets the stack's charge itself; the next look counts
     * what is left. */
    if (pthread_mutex_trylock(&g_heaps_lock) != 0)
        return;
    if (ctx == seen_ctx && value == seen_value) { /* as it was at the last look */
        pthread_mutex_unlock(&g_heaps_lock);
        return;
    }
    /* A view (cuMemGetInfo) never waits on another process of the container: it leaves the
     * count to the next look when the ledger is busy. */
    struct ledger_handle *h = &g_shim.ledger;
    if (may_wait)
        ledger_lock(h);
    else if (!ledger_trylock(h)) {
        pthread_mutex_unlock(&g_heaps_lock);
        return;
    }
    uint64_t key = PT_KIND_HEAP ^ ((uint64_t)(uintptr_t)ctx + (uint64_t)CU_LIMIT_STACK_SIZE), held = 0;
    unsigned held_dev = 0;
    void *held_ctx = NULL;
    if (!pt_remove_fast(&g_table, key, &held_dev, &held, &held_ctx))
        held = 0;
    if (want > held && ledger_charge_locked(h, (unsigned)dev, want - held, 1) == CGPU_OK) /* taken already */
        held = want;
    if (held) {
        pt_settle(&g_table);
        (void)pt_insert_fast(&g_table, key, (unsigned)dev, held, ctx);
    }
    ledger_unlock(h);
    seen_ctx = ctx;
    seen_value = value;
    pthread_mutex_unlock(&g_heaps_lock);
}
