/* The simulated CUDA driver (libcuda.so.1).  Shared machinery: the driver
 * state, a hash map, the fake device address space, memory accounting and
 * handles. */
#include "cuda_sim.h"

struct sim_driver drv = {.mu = PTHREAD_MUTEX_INITIALIZER, .slot = -1};

/* ------------------------------------------------------------------------ */
/* Small containers                                                          */

static size_t hm_slot(uintptr_t k, size_t cap)
{
    unsigned long long x = k;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

void *hm_get(const struct hmap *m, uintptr_t k)
{
    if (!m->cap || !k)
        return NULL;
    for (size_t i = hm_slot(k, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == k)
            return m->vals[i];
        if (!m->keys[i])
            return NULL;
    }
}

int hm_put(struct hmap *m, uintptr_t k, void *v)
{
    if ((m->n + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 64;
        uintptr_t *nk = calloc(ncap, sizeof *nk);
        void **nv = calloc(ncap, sizeof *nv);
        if (!nk || !nv) {
            free(nk);
            free(nv);
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i])
                continue;
            size_t j = hm_slot(m->keys[i], ncap);
            while (nk[j])
                j = (j + 1) & (ncap - 1);
            nk[j] = m->keys[i];
            nv[j] = m->vals[i];
        }
        free(m->keys);
        free(m->vals);
        m->keys = nk;
        m->vals = nv;
        m->cap = ncap;
    }
    size_t i = hm_slot(k, m->cap);
    while (m->keys[i] && m->keys[i] != k)
        i = (i + 1) & (m->cap - 1);
    if (!m->keys[i])
        m->n++;
    m->keys[i] = k;
    m->vals[i] = v;
    return 0;
}

void *hm_del(struct hmap *m, uintptr_t k)
{
    if (!m->cap || !k)
        return NULL;
    size_t i = hm_slot(k, m->cap);
    while (m->keys[i] != k) {
        if (!m->keys[i])
            return NULL;
        i = (i + 1) & (m->cap - 1);
    }
    void *v = m->vals[i];
    m->keys[i] = 0;
    m->vals[i] = NULL;
    m->n--;
    /* Backward-shift the cluster that follows. */
    for (size_t j = (i + 1) & (m->cap - 1); m->keys[j]; j = (j + 1) & (m->cap - 1)) {
        size_t home = hm_slot(m->keys[j], m->cap);
        int movable = (i <= j) ? (home <= i || home > j) : (home <= i && home > j);
        if (movable) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            m->keys[j] = 0;
            m->vals[j] = NULL;
            i = j;
        }
    }
    return v;
}

/* ------------------------------------------------------------------------ */
/* Address space                                                             */

int zone_init(struct zone *z, unsigned long long lo, unsigned long long hi)
{
    free(z->ext);
    z->lo = lo;
    z->hi = hi;
    z->cap = 16;
    z->ext = malloc(z->cap * sizeof *z->ext);
    if (!z->ext)
        return -1;
    z->ext[0].base = lo;
    z->ext[0].end = hi;
    z->n = 1;
    return 0;
}

static int zone_insert_at(struct zone *z, size_t i, unsigned long long base, unsigned long long end)
{
    if (z->n == z->cap) {
        size_t ncap = z->cap * 2;
        struct ext *ne = realloc(z->ext, ncap * sizeof *ne);
        if (!ne)
            return -1;
        z->ext = ne;
        z->cap = ncap;
    }
    memmove(&z->ext[i + 1], &z->ext[i], (z->n - i) * sizeof *z->ext);
    z->ext[i].base = base;
    z->ext[i].end = end;
    z->n++;
    return 0;
}

static void zone_remove_at(struct zone *z, size_t i)
{
    memmove(&z->ext[i], &z->ext[i + 1], (z->n - i - 1) * sizeof *z->ext);
    z->n--;
}

/* Carve [at, at+size) out of free extent i. */
static int zone_carve(struct zone *z, size_t i, unsigned long long at, unsigned long long size)
{
    struct ext e = z->ext[i];
    unsigned long long end = at + size;
    if (at == e.base && end == e.end) {
        zone_remove_at(z, i);
    } else if (at == e.base) {
        z->ext[i].base = end;
    } else if (end == e.end) {
        z->ext[i].end = at;
    } else {
        if (zone_insert_at(z, i + 1, end, e.end))
            return -1;
        z->ext[i].end = at;
    }
    return 0;
}

/* First fit (lowest address) with alignment; `hint` is tried first. */
int zone_take(struct zone *z, unsigned long long size, unsigned long long align,
                     unsigned long long hint, unsigned long long *out)
{
    if (hint && hint % align == 0) {
        for (size_t i = 0; i < z->n; i++) {
            if (z->ext[i].base <= hint && hint + size <= z->ext[i].end && hint + size > hint) {
                if (zone_carve(z, i, hint, size))
                    return -1;
                *out = hint;
                return 0;
            }
        }
    }
    for (size_t i = 0; i < z->n; i++) {
        unsigned long long at = round_up(z->ext[i].base, align);
        if (at >= z->ext[i].base && at + size >= at && at + size <= z->ext[i].end) {
            if (zone_carve(z, i, at, size))
                return -1;
            *out = at;
            return 0;
        }
    }
    return -1;
}

void zone_give(struct zone *z, unsigned long long base, unsigned long long size)
{
    unsigned long long end = base + size;
    size_t lo = 0, hi = z->n;
    while (lo < hi) { /* first extent with base > `base` */
        size_t mid = (lo + hi) / 2;
        if (z->ext[mid].base > base)
            hi = mid;
        else
            lo = mid + 1;
    }
    size_t i = lo;
    int merge_prev = i > 0 && z->ext[i - 1].end == base;
    int merge_next = i < z->n && z->ext[i].base == end;
    if (merge_prev && merge_next) {
        z->ext[i - 1].end = z->ext[i].end;
        zone_remove_at(z, i);
    } else if (merge_prev) {
        z->ext[i - 1].end = end;
    } else if (merge_next) {
        z->ext[i].base = base;
    } else if (zone_insert_at(z, i, base, end)) {
        /* Out of host memory for the free list: the range is lost, which
         * only costs address space. */
    }
}

struct zone *zone_of(unsigned long long addr)
{
    return addr >= drv.zone[0].lo && addr < drv.zone[0].hi ? &drv.zone[0] : &drv.zone[1];
}

/* Index of the first live region with base >= addr. */
static size_t live_lower(unsigned long long addr)
{
    size_t lo = 0, hi = drv.nlive;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (drv.live[mid]->base < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int live_insert(struct region *r)
{
    if (drv.nlive == drv.caplive) {
        size_t ncap = drv.caplive ? drv.caplive * 2 : 256;
        struct region **nl = realloc(drv.live, ncap * sizeof *nl);
        if (!nl)
            return -1;
        drv.live = nl;
        drv.caplive = ncap;
    }
    size_t i = live_lower(r->base);
    memmove(&drv.live[i + 1], &drv.live[i], (drv.nlive - i) * sizeof *drv.live);
    drv.live[i] = r;
    drv.nlive++;
    return 0;
}

void live_remove(struct region *r)
{
    size_t i = live_lower(r->base);
    if (i < drv.nlive && drv.live[i] == r) {
        memmove(&drv.live[i], &drv.live[i + 1], (drv.nlive - i - 1) * sizeof *drv.live);
        drv.nlive--;
    }
}

struct region *live_exact(unsigned long long addr)
{
    size_t i = live_lower(addr);
    return i < drv.nlive && drv.live[i]->base == addr ? drv.live[i] : NULL;
}

struct region *live_containing(unsigned long long addr)
{
    size_t i = live_lower(addr + 1);
    if (!i)
        return NULL;
    struct region *r = drv.live[i - 1];
    return addr - r->base < r->size ? r : NULL;
}

struct mapping *mapping_containing(struct region *r, unsigned long long addr)
{
    for (size_t i = 0; i < r->nmaps; i++)
        if (addr - r->maps[i].va < r->maps[i].size)
            return &r->maps[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Accounting                                                                */

void state_publish(int phys)
{
    if (drv.st && drv.slot >= 0 && drv.sdev[phys] >= 0) {
        struct sim_state_slot *s = &drv.st->f->slots[drv.slot];
        atomic_store(&s->used[drv.sdev[phys]], drv.used[phys]);
        atomic_store(&s->contexts[drv.sdev[phys]], (unsigned)drv.ctx_count[phys]);
    }
}

/* Bytes used on the device by everyone this simulator can see. */
static unsigned long long device_used(int phys)
{
    if (drv.st && drv.sdev[phys] >= 0)
        return sim_state_used(drv.st, drv.sdev[phys]);
    return drv.used[phys];
}

unsigned long long device_free(int phys)
{
    unsigned long long total = drv.cfg.memory[phys];
    unsigned long long busy = drv.cfg.other_used[phys] + device_used(phys);
    return busy >= total ? 0 : total - busy;
}

/* Called with drv.mu held. */
CUresult charge(int phys, unsigned long long bytes)
{
    if (phys < 0 || !bytes)
        return CUDA_SUCCESS;
    if (drv.st)
        sim_state_lock(drv.st);
    CUresult rc = CUDA_SUCCESS;
    if (bytes > device_free(phys)) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        drv.used[phys] += bytes;
        state_publish(phys);
    }
    if (drv.st)
        sim_state_unlock(drv.st);
    return rc;
}

void uncharge(int phys, unsigned long long bytes)
{
    if (phys < 0 || !bytes)
        return;
    drv.used[phys] = drv.used[phys] >= bytes ? drv.used[phys] - bytes : 0;
    state_publish(phys);
}

/* ------------------------------------------------------------------------ */
/* Handles                                                                   */

void *obj_get(const void *h, int type)
{
    struct obj *o = hm_get(&drv.objs, (uintptr_t)h);
    return o && o->type == type ? o : NULL;
}

void *obj_new(size_t size, int type, struct sim_ctx *ctx)
{
    struct obj *o = calloc(1, size);
    if (!o)
        return NULL;
    o->type = type;
    o->ctx = ctx;
    if (hm_put(&drv.objs, (uintptr_t)o, o)) {
        free(o);
        return NULL;
    }
    return o;
}

void obj_free(void *o)
{
    hm_del(&drv.objs, (uintptr_t)o);
    free(o);
}
