#include "ptrtable.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PT_INITIAL 4096u

static struct pt_entry *alloc_slots(size_t n)
{
    void *m = mmap(NULL, n * sizeof(struct pt_entry), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? NULL : m;
}

static void put(struct pt_entry *slots, size_t mask, const struct pt_entry *e)
{
    size_t i = pt_home(e->key, mask);
    while (slots[i].key != 0)
        i = (i + 1) & mask;
    slots[i] = *e;
}

static int grow(struct ptrtable *t)
{
    size_t n = t->slots ? (t->mask + 1) * 2 : PT_INITIAL;
    struct pt_entry *slots = alloc_slots(n);
    if (!slots)
        return -1;
    if (t->slots) {
        /* From an empty slot on, so that every probe chain is walked in its own order (one
         * that wraps past the end stays whole): two entries of one key keep their order. */
        size_t start = 0;
        while (t->slots[start].key != 0) /* at most half full: there is one */
            start++;
        for (size_t k = 1; k <= t->mask + 1; k++) {
            size_t i = (start + k) & t->mask;
            if (t->slots[i].key)
                put(slots, n - 1, &t->slots[i]);
        }
        munmap(t->slots, (t->mask + 1) * sizeof(struct pt_entry));
    }
    t->slots = slots;
    t->mask = n - 1;
    return 0;
}

int pt_insert_grow(struct ptrtable *t, uint64_t key, unsigned dev, uint64_t bytes, void *ctx)
{
    if ((!t->slots || (t->count + 1) * 2 > t->mask + 1) && grow(t) != 0)
        return -1;
    return pt_insert_fast(t, key, dev, bytes, ctx); /* no growing needed now */
}

int pt_insert(struct ptrtable *t, uint64_t key, unsigned dev, uint64_t bytes, void *ctx)
{
    pt_settle(t);
    return pt_insert_grow(t, key, dev, bytes, ctx);
}

void pt_fold(struct ptrtable *t, unsigned i)
{
    struct pt_entry *e = &t->pending[i];
    uint64_t key = __atomic_load_n(&e->key, __ATOMIC_ACQUIRE);
    /* Should the table not grow, the entry is lost and its charge stays: over-counted. */
    (void)pt_insert_grow(t, key, (unsigned)(e->bytes >> PT_DEV_SHIFT), e->bytes & ((1ULL << PT_DEV_SHIFT) - 1),
                         e->ctx);
    __atomic_store_n(&e->key, 0, __ATOMIC_RELAXED);
    uint64_t r = __atomic_load_n(&t->reserved, __ATOMIC_RELAXED);
    __atomic_store_n(&t->reserved, r & ~(1ULL << i), __ATOMIC_RELAXED);
}

struct pt_entry *pt_find(struct ptrtable *t, uint64_t key)
{
    pt_settle(t);
    if (!t->slots || key == 0)
        return NULL;
    for (size_t i = pt_home(key, t->mask);; i = (i + 1) & t->mask) {
        if (t->slots[i].key == key)
            return &t->slots[i];
        if (t->slots[i].key == 0)
            return NULL;
    }
}

uint64_t pt_find_range(struct ptrtable *t, uint64_t kind, uint64_t lo, uint64_t hi)
{
    pt_settle(t);
    for (size_t i = 0; t->slots && i <= t->mask; i++) {
        uint64_t key = t->slots[i].key;
        if (key && (key & 0xFFFF000000000000ULL) == (kind & 0xFFFF000000000000ULL)) {
            uint64_t v = key ^ kind;
            if (v >= lo && v < hi)
                return key;
        }
    }
    return 0;
}

int pt_remove(struct ptrtable *t, uint64_t key, unsigned *dev, uint64_t *bytes, void **ctx)
{
    void *c;
    pt_settle(t);
    int found = pt_remove_fast(t, key, dev, bytes, &c);
    if (found && ctx)
        *ctx = c;
    return found;
}

void pt_remove_at(struct ptrtable *t, size_t i)
{
    size_t mask = t->mask;
    /* Backward-shift deletion keeps every probe chain unbroken. */
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (t->slots[j].key == 0)
            break;
        size_t h = pt_home(t->slots[j].key, mask);
        /* Move j into the hole unless its home lies cyclically in (hole, j]. */
        int stays = hole <= j ? (h > hole && h <= j) : (h > hole || h <= j);
        if (!stays) {
            t->slots[hole] = t->slots[j];
            hole = j;
        }
    }
    memset(&t->slots[hole], 0, sizeof t->slots[hole]);
    t->count--;
}

void pt_learn_contexts(struct ptrtable *t, void *(*owner)(uint64_t key))
{
    pt_settle(t);
    for (size_t i = 0; t->slots && i <= t->mask; i++) {
        struct pt_entry *e = &t->slots[i];
        void *ctx;
        if (e->key && e->ctx == PT_CTX_UNKNOWN && (ctx = owner(e->key)))
            e->ctx = ctx;
    }
}

size_t pt_take_linear(struct ptrtable *t, void *ctx, struct pt_entry **out)
{
    pt_settle(t);
    *out = NULL;
    if (!t->slots || !ctx)
        return 0;
    size_t n = 0;
    for (size_t i = 0; i <= t->mask; i++)
        n += t->slots[i].key && t->slots[i].ctx == ctx && pt_is_linear(t->slots[i].key);
    struct pt_entry *v = n ? malloc(n * sizeof *v) : NULL;
    if (!v)
        return 0; /* none, or no memory: the entries stay for pt_remove_context */
    size_t k = 0;
    for (size_t i = 0; i <= t->mask && k < n;) {
        struct pt_entry *e = &t->slots[i];
        if (e->key && e->ctx == ctx && pt_is_linear(e->key)) {
            v[k++] = *e;
            pt_remove_at(t, i); /* re-check i: see pt_remove_context */
            continue;
        }
        i++;
    }
    *out = v;
    return k;
}

void pt_remove_context(struct ptrtable *t, void *ctx, void (*credit)(uint64_t key, unsigned dev, uint64_t bytes))
{
    pt_settle(t);
    if (!t->slots || !ctx)
        return;
    /* The entry at i itself is removed, not the first of its key: an address the driver
     * handed out again (in this context) while its previous holder's free (in another) was
     * not yet accounted has two entries, and the older is the other context's.  Removing by
     * key took that one and shifted entries back into slots already passed, so memory of
     * this context stayed charged after its death.  Backward-shift deletion at i moves
     * entries only into the hole at i or cyclically after it, so re-checking i after a
     * removal misses none (an entry wrapped from the start may be looked at twice). */
    for (size_t i = 0; i <= t->mask;) {
        if (t->slots[i].key && t->slots[i].ctx == ctx) {
            struct pt_entry e = t->slots[i];
            pt_remove_at(t, i);
            credit(e.key, pt_entry_dev(&e), pt_entry_bytes(&e));
            continue;
        }
        i++;
    }
}

void pt_reset(struct ptrtable *t)
{
    if (t->slots)
        munmap(t->slots, (t->mask + 1) * sizeof(struct pt_entry));
    memset(t, 0, sizeof *t);
}
