/* The container ledger: one mmap'd file shared by every process of a container.
 *
 * The container can write this file, so nothing in it is trusted for enforcement:
 * - the slice a process enforces is in its own memory (ledger_handle.limit, from the
 *   read-only cgpu.conf or the environment); the file's `limit` is for readers only;
 * - each process keeps what it holds in its own memory too (ledger_handle.held), and
 *   puts its slot back when it finds it changed; a device total that does not match
 *   its check word, or is below the caller's own holding, is recomputed from the slots.
 *
 * The lock (ledger_lock) is a futex word whose owner is a slot number, not a thread
 * id: robust pthread mutexes match owners by thread id, which collide across pid
 * namespaces (two holders at once).  A slot's owner is alive while it holds the OFD
 * lock on its liveness byte, whatever its pid namespace; a locker without a slot
 * (claiming one, or a host tool) holds the "admin" byte instead.  A waiter that finds
 * the owner dead takes the lock over and recomputes the totals from the live slots.
 * Uncontended, lock is one compare-and-swap and unlock one store: no syscall.
 *
 * Readers never lock: every write section bumps a generation counter (odd while
 * writing), and cgpu_ledger_snapshot copies the file with pread until it reads one
 * generation, even, before and after (a seqlock with a bounded retry).
 */
#ifndef CGPU_LEDGER_H
#define CGPU_LEDGER_H

#include <stddef.h>
#include <stdint.h>

#include "api.h"
#include "cgpu_macros.h"
#include "cgpu_names.h" /* CGPU_LEDGER_NAME */

/* Layouts.  The header states its version and its size.  The rule that keeps readers and writers of
 * different releases working on one file (docs/operations.md, "Upgrading"):
 * - a field may be added without a new version only at the end (the header's size grows) or in
 *   reserved or spare words, and only with a meaning for 0 or for its absence: older code
 *   ignores it, newer code reads it only within the size the header states;
 * - any other change (a field moved, resized or given another meaning) is a new version, and
 *   the release that makes it still reads the one before (ledger_read.c's table of layouts).
 * Readers and writers accept a header that states more than the size they know. */
#define CGPU_LEDGER_MAGIC_STR "CGPULDG1"
#define CGPU_LEDGER_VERSION 3u /* the layout this release creates and charges */
#define CGPU_LEDGER_OLDEST_READ 2u /* the oldest one cgpu_ledger_snapshot reads */
/* Layout 2 (before the compute block of layout 3): the same header, devices and slots. */
#define CGPU_LEDGER_V2_SIZE (offsetof(struct ledger, slots) + sizeof(((struct ledger *)0)->slots))
/* The most a header may state: fields appended by a later release are ignored, not unlimited. */
#define CGPU_LEDGER_MAX_SIZE (1u << 20)
/* Liveness locks live past the end of the data, one byte per slot; the admin byte
 * just before them. */
#define CGPU_LIVENESS_BASE (1ull << 30)
#define CGPU_ADMIN_BYTE (CGPU_LIVENESS_BASE - 1)

struct ledger_device {
    char uuid[CGPU_UUID_LEN];
    uint64_t limit;      /* the slice, for readers; never used to enforce */
    uint64_t used;       /* written under the lock, read with atomic loads */
    uint64_t peak;
    uint64_t used_check; /* ~used: a `used` changed alone was changed by someone else */
};

struct ledger_slot {
    uint32_t in_use;
    int32_t pid;
    uint64_t start_time;
    uint64_t used[CGPU_MAX_DEVICES];
};

/* One device's compute state (layout 3), shared by the container's processes.  Written by
 * whichever process is the container's compute controller (compute.c); the launch path only
 * takes tickets.  Nothing here is trusted: a bad value throttles this container only, and
 * every value is clamped where it is read. */
struct ledger_compute {
    uint32_t limit;    /* percent, for readers (the enforced one is in each process's memory) */
    uint32_t policy;   /* CGPU_COMPUTE_*, for readers */
    uint32_t used;     /* share of the GPU's time over the last window, 1/100 %, for readers */
    uint32_t seq;      /* futex word, bumped at each refill: blocked launchers sleep on it */
    int64_t tickets;   /* launches admitted until the next refill; <= 0: the gate is closed */
    int64_t credit;    /* GPU ns the container may still use; negative: debt to repay */
    uint64_t launches; /* launches taken, ever */
    uint64_t beat;     /* CLOCK_MONOTONIC ns of the controller's last tick */
    uint64_t cost;     /* estimated GPU ns per launch */
    uint64_t spare;
};

struct ledger {
    char magic[8];
    uint32_t version;
    uint32_t size;
    uint32_t ndevices;
    uint32_t active;   /* process slots in use (under the lock; read without it) */
    uint32_t lock;     /* 0 = free, else owner | LOCK_WAITERS (see ledger.c) */
    uint32_t gen;      /* odd while a writer is inside */
    uint32_t lock_seq; /* bumped by each locker, part of the lock word */
    uint32_t spare;
    uint64_t reserved[6];
    struct ledger_device devices[CGPU_MAX_DEVICES];
    struct ledger_slot slots[CGPU_MAX_SLOTS];
    struct ledger_compute compute[CGPU_MAX_DEVICES] __attribute__((aligned(64)));
};

/* A mapped ledger, and what this process knows without trusting the file.  The order puts
 * `held` in the first line of g_shim with the handle's head (shim.h). */
struct ledger_handle {
    struct ledger *l;
    int slot;                            /* this process's slot, -1 if none */
    int fd;
    int writable;
    uint64_t held[CGPU_MAX_DEVICES];     /* what this process holds, by device */
    uint64_t limit[CGPU_MAX_DEVICES];    /* the slices this process enforces */
    uint32_t compute[CGPU_MAX_DEVICES];  /* the compute limits this process enforces, percent */
    uint32_t policy[CGPU_MAX_DEVICES];   /* and their CGPU_COMPUTE_* policies */
    uint32_t turns[CGPU_MAX_DEVICES];    /* 1 where it takes the arbiter's turns: under a compute
                                          * limit, or best effort (set by the shim, shim.c) */
};

/* How to open a ledger: to read it (readers on the host), to charge it, or to
 * charge it and create it when missing (a missing or empty file is initialised). */
enum { LEDGER_READ, LEDGER_WRITE, LEDGER_CREATE };

/* Open the ledger file at `path`.  Returns CGPU_OK or CGPU_ERR_*.  Every device
 * limit of the handle starts at 0 (nothing may be charged) until ledger_ensure_devices. */
int ledger_open(const char *path, int mode, struct ledger_handle *h);
void ledger_close(struct ledger_handle *h);

/* ---- the lock (fast paths inline; see ledger.c) ---- */

/* The lock word: bit 31 = waiters may sleep on it; bits 9-30 = a sequence number
 * (a dead owner's word is never mistaken for a later owner's); bits 0-8 = the owner:
 * slot + 1, or LOCK_ADMIN for a locker without a slot. */
#define LOCK_WAITERS 0x80000000u
#define LOCK_OWNER 0x1FFu
#define LOCK_SEQ 0x7FFFFE00u
#define LOCK_ADMIN (CGPU_MAX_SLOTS + 1u)

/* Out of line: waiting (taking over from a dead holder, then repairing the totals), the admin
 * byte of lockers without a slot, waking a waiter. */
void ledger_lock_slow(struct ledger_handle *h, uint32_t mine);
void ledger_admin_enter(struct ledger_handle *h);
void ledger_admin_leave(struct ledger_handle *h);
void ledger_wake(struct ledger *l);

/* A writer is inside: readers retry (see cgpu_ledger_snapshot). */
static inline void ledger_write_begin(struct ledger *l)
{
    uint32_t g = __atomic_load_n(&l->gen, __ATOMIC_RELAXED);
    /* Odd, and new even after a dead writer left it odd. */
#ifdef __SANITIZE_THREAD__ /* ThreadSanitizer has no fences: an acquire-release exchange */
    __atomic_exchange_n(&l->gen, g & 1u ? g + 2u : g + 1u, __ATOMIC_ACQ_REL);
#else /* the data stores that follow stay after it */
    __atomic_store_n(&l->gen, g & 1u ? g + 2u : g + 1u, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
#endif
}

static inline void ledger_write_end(struct ledger *l)
{
    uint32_t g = __atomic_load_n(&l->gen, __ATOMIC_RELAXED);
    __atomic_store_n(&l->gen, (g | 1u) + 1u, __ATOMIC_RELEASE); /* even */
}

/* Inline: the fast path is one compare-and-swap; waiting, taking over from a dead owner and
 * lockers without a slot are out of line. */
static inline __attribute__((always_inline)) void ledger_lock(struct ledger_handle *h)
{
    struct ledger *l = h->l;
    int slot = __atomic_load_n(&h->slot, __ATOMIC_RELAXED);
    uint32_t id = slot >= 0 ? (uint32_t)slot + 1 : LOCK_ADMIN;
    if (slot < 0)
        ledger_admin_enter(h);
    uint32_t seq = __atomic_load_n(&l->lock_seq, __ATOMIC_RELAXED) + 1;
    uint32_t mine = id | ((seq << 9) & LOCK_SEQ), expected = 0;
    if (__builtin_expect(!__atomic_compare_exchange_n(&l->lock, &expected, mine, 0, __ATOMIC_ACQUIRE,
                                                      __ATOMIC_RELAXED), 0))
        ledger_lock_slow(h, mine);
    __atomic_store_n(&l->lock_seq, seq, __ATOMIC_RELAXED);
    ledger_write_begin(l);
}

/* A plain store, no atomic read-modify-write, and no thread-local lookup: a waiter that sets
 * LOCK_WAITERS after our load has its bit overwritten, but its futex wait compares the word
 * (now 0) and returns at once; whether we locked as the admin is in the word's owner. */
static inline __attribute__((always_inline)) void ledger_unlock(struct ledger_handle *h)
{
    struct ledger *l = h->l;
    ledger_write_end(l);
    uint32_t old = __atomic_load_n(&l->lock, __ATOMIC_RELAXED);
    __atomic_store_n(&l->lock, 0, __ATOMIC_RELEASE);
    if (__builtin_expect(!!(old & LOCK_WAITERS), 0))
        ledger_wake(l);
    if (__builtin_expect((old & LOCK_OWNER) == LOCK_ADMIN, 0))
        ledger_admin_leave(h);
}

/* The same lock for a section that writes nothing in the file (this process's pointer table):
 * no write section, so readers need not retry.  Not for lockers without a slot. */
void ledger_lock_as_admin(struct ledger_handle *h);

static inline __attribute__((always_inline)) void ledger_lock_private(struct ledger_handle *h)
{
    struct ledger *l = h->l;
    int slot = __atomic_load_n(&h->slot, __ATOMIC_RELAXED);
    if (__builtin_expect(slot < 0, 0)) {
        ledger_lock_as_admin(h);
        return;
    }
    uint32_t seq = __atomic_load_n(&l->lock_seq, __ATOMIC_RELAXED) + 1;
    uint32_t mine = ((uint32_t)slot + 1) | ((seq << 9) & LOCK_SEQ), expected = 0;
    if (__builtin_expect(!__atomic_compare_exchange_n(&l->lock, &expected, mine, 0, __ATOMIC_ACQUIRE,
                                                      __ATOMIC_RELAXED), 0))
        ledger_lock_slow(h, mine);
    __atomic_store_n(&l->lock_seq, seq, __ATOMIC_RELAXED);
}

void ledger_unlock_as_admin(struct ledger_handle *h);

static inline __attribute__((always_inline)) void ledger_unlock_private(struct ledger_handle *h)
{
    struct ledger *l = h->l;
    uint32_t old = __atomic_load_n(&l->lock, __ATOMIC_RELAXED);
    if (__builtin_expect((old & LOCK_OWNER) == LOCK_ADMIN, 0)) {
        ledger_unlock_as_admin(h); /* ledger_lock_private fell back to ledger_lock */
        return;
    }
    __atomic_store_n(&l->lock, 0, __ATOMIC_RELEASE);
    if (__builtin_expect(!!(old & LOCK_WAITERS), 0))
        ledger_wake(l);
}

/* Take the lock only if it is free now; 1 if taken. */
int ledger_trylock(struct ledger_handle *h);

/* Add the devices of `cfg` that the ledger lacks, write their limits for readers,
 * and make them the limits this handle enforces.  Returns CGPU_OK or CGPU_ERR_FULL. */
int ledger_ensure_devices(struct ledger_handle *h, const struct cgpu_config *cfg);
/* Index of `uuid` in the ledger, or -1. */
int ledger_find_device(const struct ledger *l, const char *uuid);

/* Claim a process slot for the caller and hold its liveness lock. */
int ledger_claim_slot(struct ledger_handle *h);

/* Give up the caller's slot at a clean exit: its charges go with it. */
void ledger_release_slot(struct ledger_handle *h);

/* Free the slots of dead processes.  Must be called WITHOUT the lock held.
 * Returns the number of slots freed. */
unsigned ledger_sweep(struct ledger_handle *h);
/* The same, but gives up rather than wait for the lock (for views). */
unsigned ledger_try_sweep(struct ledger_handle *h);

/* Charge `bytes` to device `dev` for the caller's slot; fails with
 * CGPU_ERR_LIMIT when it would exceed h->limit[dev].  `force` skips the check. */
int ledger_charge(struct ledger_handle *h, unsigned dev, uint64_t bytes, int force);
/* The same, with the lock already held. */
int ledger_charge_locked(struct ledger_handle *h, unsigned dev, uint64_t bytes, int force);
void ledger_credit(struct ledger_handle *h, unsigned dev, uint64_t bytes);
/* The same, with the lock already held. */
void ledger_credit_locked(struct ledger_handle *h, unsigned dev, uint64_t bytes);

/* ---- the charge and the credit, inline for the allocation path ---- */

static inline void ledger_set_used(struct ledger_device *d, uint64_t used)
{
    __atomic_store_n(&d->used, used, __ATOMIC_RELAXED);
    __atomic_store_n(&d->used_check, ~used, __ATOMIC_RELAXED);
}

/* Someone else changed what only this process writes (its slot) or a total alone:
 * put our slot back from our own memory and recompute the totals.  Under the lock. */
__attribute__((noinline, cold)) void ledger_heal(struct ledger_handle *h, int slot);

/* Whether device `dev`'s total, read as `used`, or our slot was changed behind our back. */
static inline int ledger_tampered(const struct ledger_handle *h, int slot, unsigned dev, uint64_t used)
{
    const struct ledger_device *d = &h->l->devices[dev];
    return used != ~d->used_check || h->l->slots[slot].used[dev] != h->held[dev] || used < h->held[dev];
}

/* Device `dev`'s total, checked and read once (a second read could see a write that
 * came after the check), healed first if it was changed.  Under the lock.  Returns 0
 * when the file keeps changing under us (*used is then unset). */
static inline __attribute__((always_inline)) int ledger_checked_used(struct ledger_handle *h, int slot, unsigned dev,
                                                                     uint64_t *used)
{
    for (int tries = 0; tries < 3; tries++) {
        *used = __atomic_load_n(&h->l->devices[dev].used, __ATOMIC_RELAXED);
        if (likely(!ledger_tampered(h, slot, dev, *used)))
            return 1;
        ledger_heal(h, slot);
    }
    return 0;
}

/* ledger_charge_locked's body (inline on the allocation path). */
static inline __attribute__((always_inline)) int ledger_charge_inline(struct ledger_handle *h, unsigned dev,
                                                                      uint64_t bytes, int force)
{
    struct ledger *l = h->l;
    struct ledger_device *d = &l->devices[dev];
    int slot = __atomic_load_n(&h->slot, __ATOMIC_RELAXED);
    if (unlikely(slot < 0)) /* the slot was given back (exit): nothing may be charged any more */
        return CGPU_ERR_FULL;
    uint64_t used, limit = h->limit[dev];
    if (unlikely(!ledger_checked_used(h, slot, dev, &used)))
        return CGPU_ERR_LIMIT; /* fail closed */
    if (!force && (bytes > limit || used > limit - bytes))
        return CGPU_ERR_LIMIT;
    ledger_set_used(d, used + bytes);
    l->slots[slot].used[dev] += bytes;
    h->held[dev] += bytes;
    if (used + bytes > d->peak)
        d->peak = used + bytes;
    return CGPU_OK;
}

/* ledger_credit_locked's body (inline on the free path). */
static inline __attribute__((always_inline)) void ledger_credit_inline(struct ledger_handle *h, unsigned dev,
                                                                       uint64_t bytes)
{
    struct ledger *l = h->l;
    int slot = __atomic_load_n(&h->slot, __ATOMIC_RELAXED);
    if (unlikely(slot < 0))
        return; /* the slot was given back at exit already */
    uint64_t used;
    int checked = ledger_checked_used(h, slot, dev, &used);
    if (bytes > h->held[dev])
        bytes = h->held[dev]; /* never credit what this process did not charge */
    h->held[dev] -= bytes;
    if (unlikely(!checked)) {
        ledger_heal(h, slot); /* the slot from our own record, and the totals from the slots */
        return;
    }
    l->slots[slot].used[dev] -= bytes; /* used >= what we held >= bytes: checked */
    ledger_set_used(&l->devices[dev], used - bytes);
}

/* Used bytes of a device, read without the lock. */
static inline uint64_t ledger_used(const struct ledger *l, unsigned dev)
{
    return __atomic_load_n(&l->devices[dev].used, __ATOMIC_RELAXED);
}

/* Used bytes of a device as a view shows them: a total that disagrees with its check word is
 * repaired first when the lock is free, else the live slots are summed.  Never waits. */
uint64_t ledger_view_used(struct ledger_handle *h, unsigned dev);

/* Whether slot `s`'s owner is gone (its liveness byte is free). */
int ledger_slot_is_dead(const struct ledger_handle *h, unsigned s);
/* In a forked child: forget the parent's lock state. */
void ledger_forget_process(void);

/* Used bytes of a device summed over the live slots, without the lock (what a
 * reader on the host sees; a liveness test per slot in use). */
uint64_t ledger_live_used(const struct ledger_handle *h, unsigned dev);

#endif
