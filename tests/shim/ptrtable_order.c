/* The shim's pointer table under random inserts and removes over few keys, against a model:
 * each key's entries in insertion order.  A remove must give back the key's oldest entry
 * (the free path relies on it when the driver hands an address out again before the free
 * of its previous holder was accounted), the fast and the general remove alike, and the
 * table must keep every entry.  Half the inserts go the allocation path's way: a pending slot
 * reserved (the charge's locked step), published later in any order among up to 8 in flight
 * (after the driver call), falling back to a locked insert where pt_publish refuses; the
 * model's order is the order of publication.  Prints "ok" or what went wrong; exit status 0
 * only if ok. */
#include <stdio.h>
#include <stdlib.h>

#include "ptrtable.h"

#define KEYS 24
#define DEPTH 64

static uint64_t model[KEYS][DEPTH]; /* each key's values, oldest first */
static int depth[KEYS];

#define FLIGHT 8
static struct {
    int slot;
    unsigned k;
} flight[FLIGHT]; /* reserved, not yet published */
static int nflight;

static uint64_t rng = 88172645463325252ULL;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(void)
{
    /* Keys whose home slots (in the table's first size) are its last 8: their chains run into
     * each other and wrap past the end, so removals shift entries of other keys too. */
    uint64_t keys[KEYS];
    unsigned nkeys = 0;
    for (uint64_t p = 0x7f0000000000ULL; nkeys < KEYS; p += 0x200000ULL) /* device pointers, 2 MiB apart */
        if (pt_home(p, 4095) >= 4088)
            keys[nkeys++] = p;
    struct ptrtable t = {0};
    uint64_t serial = 1, count = 0, fillers = 0;
    for (long step = 0; step < 2000000; step++) {
        if (step == 1000000) { /* other keys, until the table grows (rehashing the chains) */
            size_t mask = t.mask;
            for (uint64_t p = 0x100000000000ULL; t.mask == mask; p += 0x200000ULL, fillers++)
                if (pt_insert(&t, p, 0, 1, NULL) != 0) {
                    printf("insert failed while growing\n");
                    return 1;
                }
        }
        unsigned k = (unsigned)(next() % KEYS);
        uint64_t key = keys[k];
        unsigned way = (unsigned)(next() % 4);
        if (way == 0 && nflight < FLIGHT && depth[k] + FLIGHT < DEPTH && count < 1000) { /* reserve */
            int slot = pt_reserve(&t);
            if (slot < 0) {
                printf("step %ld: no pending slot with %d in flight\n", step, nflight);
                return 1;
            }
            flight[nflight].slot = slot;
            flight[nflight++].k = k;
            continue;
        }
        if (way == 1 && nflight > 0) { /* publish one in flight, any of them */
            int f = (int)(next() % (uint64_t)nflight);
            unsigned fk = flight[f].k;
            int slot = flight[f].slot;
            flight[f] = flight[--nflight];
            uint64_t value = serial++ & 0xFFFFFFFFFFFFULL;
            if (pt_publish(&t, slot, keys[fk], fk % 8, value, (void *)(uintptr_t)fk) != 0) {
                pt_release(&t, slot); /* an entry of this key is pending: insert after it */
                pt_settle(&t);
                if (pt_insert_fast(&t, keys[fk], fk % 8, value, (void *)(uintptr_t)fk) != 0) {
                    printf("insert failed at step %ld\n", step);
                    return 1;
                }
            }
            model[fk][depth[fk]++] = value;
            count++;
            continue;
        }
        if (way == 2 && depth[k] + FLIGHT < DEPTH && count < 1000) {
            uint64_t value = serial++ & 0xFFFFFFFFFFFFULL;
            pt_settle(&t); /* as track() does */
            if (pt_insert_fast(&t, key, k % 8, value, (void *)(uintptr_t)k) != 0) {
                printf("insert failed at step %ld\n", step);
                return 1;
            }
            model[k][depth[k]++] = value;
            count++;
            continue;
        }
        unsigned dev;
        uint64_t bytes;
        void *ctx = NULL;
        int found = next() % 2 ? pt_remove_fast(&t, key, &dev, &bytes, &ctx) : pt_remove(&t, key, &dev, &bytes, &ctx);
        if (found != (depth[k] > 0)) {
            printf("step %ld: key %u found=%d with %d entries\n", step, k, found, depth[k]);
            return 1;
        }
        if (!found)
            continue;
        if (bytes != model[k][0] || dev != k % 8 || ctx != (void *)(uintptr_t)k) {
            printf("step %ld: key %u gave back %llu, its oldest is %llu\n", step, k, (unsigned long long)bytes,
                   (unsigned long long)model[k][0]);
            return 1;
        }
        for (int i = 1; i < depth[k]; i++)
            model[k][i - 1] = model[k][i];
        depth[k]--;
        count--;
    }
    for (int f = 0; f < nflight; f++)
        pt_release(&t, flight[f].slot);
    pt_settle(&t);
    if (t.reserved != 0) {
        printf("pending slots left taken: %llx\n", (unsigned long long)t.reserved);
        return 1;
    }
    if (t.count != count + fillers || t.mask != 8191) { /* grown once, at the fillers */
        printf("table holds %zu entries in %zu slots, the model %llu\n", t.count, t.mask + 1,
               (unsigned long long)(count + fillers));
        return 1;
    }
    printf("ok\n");
    return 0;
}
