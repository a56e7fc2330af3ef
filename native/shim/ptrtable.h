/* Per-process table of what this process charged: key -> (bytes, ledger device).
 *
 * Open addressing with linear probing and backward-shift deletion (no tombstones).
 * It is private to the process and always used under the ledger lock, so it
 * needs no lock of its own.  It grows (a rare mmap) at half load.
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
    void *ctx;      /* the context whose destruction frees it, or NULL */
    uint64_t aux;   /* VMM handle: references (itself, mappings, retains); mapping: the handle */
};

#define PT_DEV_SHIFT 56

static inline unsigned pt_entry_dev(const struct pt_entry *e)
{
    return (unsigned)(e->bytes >> PT_DEV_SHIFT);
}

static inline uint64_t pt_entry_bytes(const struct pt_entry *e)
{
    return e->bytes & ((1ULL << PT_DEV_SHIFT) - 1);
}

struct ptrtable {
    struct pt_entry *slots;
    size_t mask;
    size_t count;
};

/* Returns 0, or -1 if the table could not grow (the entry is then not kept). */
int pt_insert(struct ptrtable *t, uint64_t key, unsigned dev, uint64_t bytes, void *ctx);
/* Removes `key`; returns 1 and fills *dev, *bytes, *ctx if it was there. */
int pt_remove(struct ptrtable *t, uint64_t key, unsigned *dev, uint64_t *bytes, void **ctx);
/* Takes out the entry at index `i` and closes the gap (backward shift). */
void pt_remove_at(struct ptrtable *t, size_t i);

static inline size_t pt_home(uint64_t key, size_t mask)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 32) & mask;
}

/* pt_insert for the allocation path: inline while the table needs no growing. */
static inline __attribute__((always_inline)) int pt_insert_fast(struct ptrtable *t, uint64_t key, unsigned dev,
                                                                uint64_t bytes, void *ctx)
{
    if (__builtin_expect(!t->slots || (t->count + 1) * 2 > t->mask + 1, 0))
        return pt_insert(t, key, dev, bytes, ctx);
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
 * their order. */
static inline __attribute__((always_inline)) int pt_remove_fast(struct ptrtable *t, uint64_t key, unsigned *dev,
                                                                uint64_t *bytes, void **ctx)
{
    if (__builtin_expect(!t->slots || key == 0, 0))
        return 0;
    size_t mask = t->mask, i = pt_home(key, mask);
    while (t->slots[i].key != key) {
        if (t->slots[i].key == 0)
            return 0;
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
/* Removes every entry of context `ctx`, calling `credit` for each. */
void pt_remove_context(struct ptrtable *t, void *ctx, void (*credit)(uint64_t key, unsigned dev, uint64_t bytes));
/* Forget everything (after fork, in the child). */
void pt_reset(struct ptrtable *t);

#endif
