/* Charging: every allocation wrapper reserves on the ledger before the driver call,
 * then tracks the object in this process's pointer table; every free untracks and
 * credits.  The hot path is here, inline; nothing in it allocates or makes a syscall. */
#ifndef CGPU_CHARGE_H
#define CGPU_CHARGE_H

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>

#include "cgpu_macros.h"
#include "ptrtable.h"
#include "shim.h"

extern struct ptrtable g_table; /* guarded by the ledger lock */

/* What an allocation of `bytes` really takes: large ones occupy whole 2 MiB
 * pages, small ones are packed by the driver at 512-byte alignment. */
static inline uint64_t charge_of(uint64_t bytes)
{
    if (bytes >= MiB)
        return (bytes + 2 * MiB - 1) & ~(2 * MiB - 1);
    return (bytes + 511) & ~511ULL;
}

/* The slow half of reserve: sweep dead processes, retry, else report. */
CUresult charge_reserve_slow(int dev, uint64_t charge);

/* Whether this process holds a ledger slot, claiming one on its first charge. */
static inline __attribute__((always_inline)) int have_slot(void)
{
    return likely(__atomic_load_n(&g_shim.ledger.slot, __ATOMIC_RELAXED) >= 0) || shim_claim_slot() == 0;
}

/* Reserve `charge` on `dev` before calling the driver. */
static inline __attribute__((always_inline)) CUresult reserve(int dev, uint64_t charge)
{
    if (unlikely(!have_slot()))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (likely(ledger_charge(&g_shim.ledger, (unsigned)dev, charge, 0) == CGPU_OK))
        return CUDA_SUCCESS;
    return charge_reserve_slow(dev, charge);
}

static inline void unreserve(int dev, uint64_t charge)
{
    ledger_credit(&g_shim.ledger, (unsigned)dev, charge);
}

/* reserve, and in the same locked step a pending slot of the pointer table for the new
 * object (*pending; -1 when none was taken: track_pending then inserts under the lock).
 * One lock round trip where reserve and track took two. */
static inline __attribute__((always_inline)) CUresult reserve_pending(int dev, uint64_t charge, int *pending)
{
    *pending = -1;
    if (unlikely(!have_slot()))
        return CUDA_ERROR_OUT_OF_MEMORY;
    ledger_lock(&g_shim.ledger);
    int rc = ledger_charge_inline(&g_shim.ledger, (unsigned)dev, charge, 0);
    if (likely(rc == CGPU_OK))
        *pending = pt_reserve(&g_table);
    ledger_unlock(&g_shim.ledger);
    if (likely(rc == CGPU_OK))
        return CUDA_SUCCESS;
    return charge_reserve_slow(dev, charge);
}

/* The driver refused: credit the charge and give the pending slot back. */
static inline void unreserve_pending(int dev, uint64_t charge, int pending)
{
    ledger_lock(&g_shim.ledger);
    ledger_credit_locked(&g_shim.ledger, (unsigned)dev, charge);
    if (pending >= 0)
        pt_release(&g_table, pending);
    ledger_unlock(&g_shim.ledger);
}

/* The calling thread's context: the driver frees a context's memory with it. */
static inline void *current_context(void)
{
    void *ctx = NULL;
    if (g_shim.ctx_get_current)
        g_shim.ctx_get_current(&ctx);
    return ctx;
}

/* Attribute `attr` of device `ordinal`, asked of the driver (off the hot path): 0 with
 * *value set, or -1 where the driver cannot say. */
static inline int device_attribute(int *value, CUdevice_attribute attr, CUdevice ordinal)
{
    CUresult (*get)(int *, CUdevice_attribute, CUdevice) =
        (CUresult(*)(int *, CUdevice_attribute, CUdevice))shim_driver_sym("cuDeviceGetAttribute");
    return get && get(value, attr, ordinal) == CUDA_SUCCESS ? 0 : -1;
}

/* Remember `key` and its charge.  If the table cannot grow, the entry is lost but
 * the charge stays (until the process ends): over-counted, never under. */
static inline __attribute__((always_inline)) void track(uint64_t key, int dev, uint64_t charge, void *ctx)
{
    ledger_lock_private(&g_shim.ledger); /* the table only: no write section in the file */
    pt_settle(&g_table); /* what is pending is older: it goes first */
    (void)pt_insert_fast(&g_table, key, (unsigned)dev, charge, ctx);
    ledger_unlock_private(&g_shim.ledger);
}

/* track, into the pending slot that reserve_pending took: no lock, unless there was none or
 * an entry of the same key is pending (then under the lock, after it). */
static inline __attribute__((always_inline)) void track_pending(int pending, uint64_t key, int dev, uint64_t charge,
                                                                void *ctx)
{
    if (likely(pending >= 0) && likely(pt_publish(&g_table, pending, key, (unsigned)dev, charge, ctx) == 0))
        return;
    ledger_lock_private(&g_shim.ledger);
    if (pending >= 0)
        pt_release(&g_table, pending);
    pt_settle(&g_table);
    (void)pt_insert_fast(&g_table, key, (unsigned)dev, charge, ctx);
    ledger_unlock_private(&g_shim.ledger);
}

/* Credit `charge` on `dev` to this process's slot.  Caller holds the ledger lock;
 * the shape pt_remove_context wants. */
void credit_locked(uint64_t key, unsigned dev, uint64_t charge);

/* A tracked object, taken out of the table with its charge credited. */
struct untracked {
    int dev;
    uint64_t charge;
    void *ctx;
};

/* Forget `key`; returns whether it was known.  Its charge stays. */
static inline int untrack(uint64_t key, struct untracked *out)
{
    unsigned dev = 0;
    ledger_lock_private(&g_shim.ledger);
    int found = pt_remove_fast(&g_table, key, &dev, &out->charge, &out->ctx);
    ledger_unlock_private(&g_shim.ledger);
    out->dev = (int)dev;
    return found;
}

/* Memory freed into a stream-ordered pool stays the pool's until the driver trims
 * it (a sync over the release threshold, cuMemPoolTrimTo): its charge stays too,
 * counted here by ledger device, and pool_reconcile credits what the pools no
 * longer keep.  Over-counted until then, never under. */
extern uint64_t g_pool_kept[CGPU_MAX_DEVICES];

/* Credit what the known pools gave back; whether anything was credited.  Slow path:
 * it asks the driver about each pool. */
int pool_reconcile(void);
/* The per-context heaps (charge.c): what limit `limit` at `value` takes beyond its default on
 * device `ordinal`, in whole pages; the lock of their bookkeeping (cuCtxSetLimit and the stack
 * a launch grew); and charging the stack the driver grew at a launch, if it did (`may_wait`: 0
 * for a view, which skips it while the ledger is busy). */
uint64_t heap_beyond_default(CUlimit limit, uint64_t value, CUdevice ordinal);
extern pthread_mutex_t g_heaps_lock;
void stack_reconcile(int may_wait);

/* Remember a pool a program made or allocates from (cuMemPoolCreate,
 * cuMemAllocFromPoolAsync); forget a destroyed one. */
void pool_seen(CUmemoryPool pool);
void pool_forget(CUmemoryPool pool);

/* The common shape of every allocation wrapper: one locked step charges and takes a pending
 * slot in the pointer table before the driver call; after it, the slot is filled without
 * the lock (see ptrtable.h). */
#define CHARGED_ALLOC(dev_expr, bytes_expr, call, key_expr, ctx_expr)           \
    do {                                                                       \
        int m_ = mode();                                                       \
        if (unlikely(m_ == SHIM_FAILED || m_ == SHIM_UNINIT))                  \
            return CUDA_ERROR_NOT_INITIALIZED;                                 \
        int dev_ = m_ == SHIM_LIMITED ? (dev_expr) : -1;                       \
        if (dev_ < 0)                                                          \
            return call;                                                       \
        uint64_t charge_ = (bytes_expr);                                       \
        int pending_;                                                          \
        CUresult rc_ = reserve_pending(dev_, charge_, &pending_);              \
        if (rc_ != CUDA_SUCCESS)                                               \
            return rc_;                                                        \
        rc_ = call;                                                            \
        if (likely(rc_ == CUDA_SUCCESS))                                       \
            track_pending(pending_, (key_expr), dev_, charge_, (ctx_expr));    \
        else                                                                   \
            unreserve_pending(dev_, charge_, pending_);                        \
        return rc_;                                                            \
    } while (0)

/* Call the driver's free; once the memory is gone, take `key` out of the table and run
 * `freed` (which sees u_: the device and the charge) in one locked step.  Credited before
 * the call, the bytes could be charged and allocated by another process while this one
 * still holds them.  Should another thread get the same address from the driver in
 * between, its entry lies after ours in the key's probe chain (see pt_remove_fast), so ours
 * is the one taken out.  A refused free leaves the table as it was. */
#define FREE_THEN(key_expr, call, freed)                                       \
    do {                                                                       \
        if (mode() != SHIM_LIMITED)                                            \
            return call;                                                       \
        CUresult rc_ = call;                                                   \
        if (likely(rc_ == CUDA_SUCCESS)) {                                     \
            struct untracked u_;                                               \
            unsigned d_ = 0;                                                   \
            ledger_lock(&g_shim.ledger);                                       \
            if (pt_remove_fast(&g_table, (key_expr), &d_, &u_.charge, &u_.ctx)) { \
                u_.dev = (int)d_;                                              \
                freed;                                                         \
            }                                                                  \
            ledger_unlock(&g_shim.ledger);                                     \
        }                                                                      \
        return rc_;                                                            \
    } while (0)

/* A free: the charge is credited once the memory is gone, not before. */
#define CHARGED_FREE(key_expr, call) FREE_THEN(key_expr, call, ledger_credit_inline(&g_shim.ledger, (unsigned)u_.dev, u_.charge))

/* cuMemFreeAsync: the charge moves to g_pool_kept (the pool may keep the memory). */
#define POOL_FREE(key_expr, call)                                              \
    FREE_THEN(key_expr, call, __atomic_add_fetch(&g_pool_kept[u_.dev], u_.charge, __ATOMIC_RELAXED))

#endif
