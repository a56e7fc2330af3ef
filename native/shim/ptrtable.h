/* Per-process table of what this process charged: key -> (bytes, ledger device).
 *
 * Open addressing with linear probing and backward-shift deletion (no tombstones).
 * It is private to the process and always used under the ledger lock, so it
 * needs no lock of its own.  It grows (a rare mmap) at half load.
 *
 * Pending entries: an allocation takes a pending slot in the locked step that charges it,
 * before the driver call, and fills it after the call without the lock (pt_publish: plain
 * stores, the key last with release).  The next locked step that touches the table folds
 * what was published into it (pt_settle), and a free finds its entry there or still pending.
 * So an alloc+free pair takes the lock twice, not three times.  Order: a published entry is
 * newer than every table entry of its key (each locked step folds all that was published
 * before it), and pt_publish refuses when an entry of the same key is pending already (the
 * caller then inserts under the lock), so at most one entry of a key is ever pending.
 */
#ifndef CGPU_PTRTABLE_H
#define CGPU_PTRTABLE_H

#include <stdint.h>
#include <stddef.h>

/* Keys of different kinds of object never collide: each kind XORs its own tag. */
#define PT_KIND_PTR 0x0ULL
#define PT_KIND_ARRAY 0xA5A5000000000001ULL
#define PT_KIND_MIPMAP 0x5A5A000000000002ULL
#define PT_KIND_HANDLE 0xC3C3000000000003ULL
#define PT_KIND_CONTEXT 0x3C3C000000000004ULL /* a device's context overhead (key: device) */
#define PT_KIND_CTXDEV 0x6969000000000005ULL  /* a live context and its device (no charge) */
#define PT_KIND_MAP 0x9696000000000006ULL     /* a VMM mapping: bytes = its size, aux = handle */
#define PT_KIND_HEAP 0x7878000000000007ULL    /* a context's heap beyond its default (key: ctx + CUlimit) */
#define PT_KIND_GRAPH 0x8787000000000008ULL   /* a live executable graph: bytes = its memory nodes' footprint */
#define PT_KIND_IPC 0x1E1E000000000009ULL     /* an opened IPC memory handle (key: the address) */
#define PT_KIND_MODULE 0xE1E100000000000AULL  /* a module's or library's globals */

struct pt_entry {
    uint64_t key;   /* 0 = empty */
    uint64_t bytes; /* high 8 bits: ledger device index */
    void *ctx;      /* the context whose destruction frees it, NULL, or PT_CTX_UNKNOWN */
    uint64_t aux;   /* VMM handle: references (itself, mappings, retains); mapping: the handle */
};

#define PT_DEV_SHIFT 56

/* The context of an allocation whose context was not asked when it was made (asking is a
 * driver call on the allocation's hot path): learned from the driver, by its address, before
 * any context can die (pt_learn_contexts).  Never a context's handle. */
#define PT_CTX_UNKNOWN ((void *)(uintptr_t)1)

static inline unsigned pt_entry_dev(const struct pt_entry *e)
{
    return (unsigned)(e->bytes >> PT_DEV_SHIFT);
}

static inline uint64_t pt_entry_bytes(const struct pt_entry *e)
{
    return e->bytes & ((1ULL << PT_DEV_SHIFT) - 1);
}

#define PT_PENDING 64

struct ptrtable {
    struct pt_entry *slots;
    size_t mask;
    size_t count;
    uint64_t reserved; /* pending slots taken: set and cleared under the lock, read by publishers */
    struct pt_entry pending[PT_PENDING]; /* key 0: reserved, not yet published */
};

/* Returns 0, or -1 if the table could not grow (the entry is then not kept). */
int pt_insert(struct ptrtable *t, uint64_t key, unsigned dev, uint64_t bytes, void *ctx);
/* pt_insert without folding the pending entries first (pt_insert_fast's slow path). */
int pt_insert_grow(struct ptrtable *t, uint64_t key, unsigned dev, uint64_t bytes, void *ctx);
/* Moves published pending entry `i` into the table. */
void pt_fold(struct ptrtable *t, unsigned i);
/* Removes `key`; returns 1 and fills *dev, *bytes, *ctx if it was there. */
int pt_remove(struct ptrtable *t, uint64_t key, unsigned *dev, uint64_t *bytes, void **ctx);
/* Takes out the entry at index `i` and closes the gap (backward shift). */
void pt_remove_at(struct ptrtable *t, size_t i);

static inline size_t pt_home(uint64_t key, size_t mask)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 32) & mask;
}

/* Fold every published pending entry into the table.  Under the lock; before any use of
 * the table but pt_remove_fast (the out-of-line functions below do it themselves). */
static inline __attribute__((always_inline)) void pt_settle(struct ptrtable *t)
{
    uint64_t r = __atomic_load_n(&t->reserved, __ATOMIC_RELAXED);
    while (__builtin_expect(r != 0, 0)) {
        unsigned i = (unsigned)__builtin_ctzll(r);
        r &= r - 1;
        if (__atomic_load_n(&t->pending[i].key, __ATOMIC_ACQUIRE))
            pt_fold(t, i);
    }
}

/* A pending slot for an allocation about to be made; -1 when all are taken.  Under the lock. */
static inline __attribute__((always_inline)) int pt_reserve(struct ptrtable *t)
{
    pt_settle(t);
    uint64_t r = __atomic_load_n(&t->reserved, __ATOMIC_RELAXED);
    if (__builtin_expect(r == ~0ULL, 0))
        return -1;
    unsigned i = (unsigned)__builtin_ctzll(~r);
    __atomic_store_n(&t->reserved, r | (1ULL << i), __ATOMIC_RELAXED);
    return (int)i;
}

/* Gives back reserved slot `i` unpublished (the allocation failed).  Under the lock. */
static inline void pt_release(struct ptrtable *t, int i)
{
    uint64_t r = __atomic_load_n(&t->reserved, __ATOMIC_RELAXED);
    __atomic_store_n(&t->reserved, r & ~(1ULL << i), __ATOMIC_RELAXED);
}

/* Fill reserved slot `i`, without the lock; -1 (nothing written) when an entry of `key` is
 * pending already: the caller releases the slot and inserts under the lock, after settling,
 * so that the older entry stays first.  (The driver hands an address out again only after
 * its free, which came after that entry's publication: this check sees it.) */
static inline __attribute__((always_inline)) int pt_publish(struct ptrtable *t, int i, uint64_t key, unsigned dev,
                                                            uint64_t bytes, void *ctx)
{
    uint64_t r = __atomic_load_n(&t->reserved, __ATOMIC_RELAXED) & ~(1ULL << i);
    while (__builtin_expect(r != 0, 0)) {
        unsigned j = (unsigned)__builtin_ctzll(r);
        r &= r - 1;
        if (__atomic_load_n(&t->pending[j].key, __ATOMIC_ACQUIRE) == key)
            return -1;
    }
    struct pt_entry *e = &t->pending[i];
    e->bytes = bytes | ((uint64_t)dev << PT_DEV_SHIFT);
    e->ctx = ctx;
    e->aux = 0;
    __atomic_store_n(&e->key, key, __ATOMIC_RELEASE);
    return 0;
}

/* Takes the published pending entry of `key` out; 1 if there was one.  Under the lock. */
static inline __attribute__((always_inline)) int pt_take_pending(struct ptrtable *t, uint64_t key, unsigned *dev,
                                                                 uint64_t *bytes, void **ctx)
{
    uint64_t all = __atomic_load_n(&t->reserved, __ATOMIC_RELAXED);
    for (uint64_t r = all; r; r &= r - 1) {
        unsigned i = (unsigned)__builtin_ctzll(r);
        struct pt_entry *e = &t->pending[i];
        if (__atomic_load_n(&e->key, __ATOMIC_ACQUIRE) == key) {
            *ctx = e->ctx;
            *dev = (unsigned)(e->bytes >> PT_DEV_SHIFT);
            *bytes = e->bytes & ((1ULL << PT_DEV_SHIFT) - 1);
            __atomic_store_n(&e->key, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&t->reserved, all & ~(1ULL << i), __ATOMIC_RELAXED);
            return 1;
        }
    }
    return 0;
}

/* Insert for the allocation path: inline while the table needs no growing.  Does not
 * settle: the caller does, first, where pending entries may exist. */
static inline __attribute__((always_inline)) int pt_insert_fast(struct ptrtable *t, uint64_t key, unsigned dev,
                                                                uint64_t bytes, void *ctx)
{
    if (__builtin_expect(!t->slots || (t->count + 1) * 2 > t->mask + 1, 0))
        return pt_insert_grow(t, key, dev, bytes, ctx);
    size_t i = pt_home(key, t->mask);
    while (t->slots[i].key != 0)
        i = (i + 1) & t->mask;
    t->slots[i] = (struct pt_entry){.key = key, .bytes = bytes | ((uint64_t)dev << PT_DEV_SHIFT), .ctx = ctx};
    t->count++;
    return 0;
}

/* pt_remove for the free path: inline where no entry follows the removed one.  Of two
 * entries with one key (an address the driver handed out again before the free of its
 * previous holder was accounted), the older is found first: an insert takes the first
 * empty slot after every entry of the key's chain, and the backward shift and growing keep
 * their order; a pending entry is newer than the table's, so the table is asked first. */
static inline __attribute__((always_inline)) int pt_remove_fast(struct ptrtable *t, uint64_t key, unsigned *dev,
                                                                uint64_t *bytes, void **ctx)
{
    if (__builtin_expect(key == 0, 0))
        return 0;
    if (__builtin_expect(!t->slots, 0))
        return pt_take_pending(t, key, dev, bytes, ctx);
    size_t mask = t->mask, i = pt_home(key, mask);
    while (t->slots[i].key != key) {
        if (t->slots[i].key == 0)
            return pt_take_pending(t, key, dev, bytes, ctx);
        i = (i + 1) & mask;
    }
    struct pt_entry *e = &t->slots[i];
    *ctx = e->ctx;
    *dev = (unsigned)(e->bytes >> PT_DEV_SHIFT);
    *bytes = e->bytes & ((1ULL << PT_DEV_SHIFT) - 1);
    if (__builtin_expect(t->slots[(i + 1) & mask].key != 0, 0)) {
        pt_remove_at(t, i);
        return 1;
    }
    *e = (struct pt_entry){0};
    t->count--;
    return 1;
}
/* The entry of `key`, to update in place, or NULL. */
struct pt_entry *pt_find(struct ptrtable *t, uint64_t key);
/* The key of the first entry of kind `kind` whose (key ^ kind) lies in [lo, hi), or 0. */
uint64_t pt_find_range(struct ptrtable *t, uint64_t kind, uint64_t lo, uint64_t hi);
/* Asks `owner` the context of every entry of context PT_CTX_UNKNOWN (its key: an address) and
 * keeps the answer; an entry whose owner cannot be told (NULL) stays unknown. */
void pt_learn_contexts(struct ptrtable *t, void *(*owner)(uint64_t key));
/* Linear device memory's keys are its addresses (kind 0, below the kinds' tags). */
static inline int pt_is_linear(uint64_t key)
{
    return (key >> 48) == 0;
}
/* Takes every linear-memory entry of context `ctx` out of the table into a malloc'd array
 * (*out, to free), before the driver destroys the context; returns how many.  0 with *out
 * NULL when there are none or no memory (the entries then stay in the table). */
size_t pt_take_linear(struct ptrtable *t, void *ctx, struct pt_entry **out);
/* Removes every entry of context `ctx`, calling `credit` for each. */
void pt_remove_context(struct ptrtable *t, void *ctx, void (*credit)(uint64_t key, unsigned dev, uint64_t bytes));
/* Forget everything (after fork, in the child). */
void pt_reset(struct ptrtable *t);

#endif
