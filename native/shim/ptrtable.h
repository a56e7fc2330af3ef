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
#define PT_KIND_CONTEXT 0x3C3C000000000004ULL /* a context's own overhead */

struct pt_entry {
    uint64_t key;   /* 0 = empty */
    uint64_t bytes; /* high 8 bits: ledger device index */
    void *ctx;      /* the context whose destruction frees it, or NULL */
};

struct ptrtable {
    struct pt_entry *slots;
    size_t mask;
    size_t count;
};

/* Returns 0, or -1 if the table could not grow (the entry is then not kept). */
int pt_insert(struct ptrtable *t, uint64_t key, unsigned dev, uint64_t bytes, void *ctx);
/* Removes `key`; returns 1 and fills *dev, *bytes, *ctx if it was there. */
int pt_remove(struct ptrtable *t, uint64_t key, unsigned *dev, uint64_t *bytes, void **ctx);
/* Removes every entry of context `ctx`, calling `credit` for each. */
void pt_remove_context(struct ptrtable *t, void *ctx, void (*credit)(uint64_t key, unsigned dev, uint64_t bytes));
/* Forget everything (after fork, in the child). */
void pt_reset(struct ptrtable *t);

#endif
