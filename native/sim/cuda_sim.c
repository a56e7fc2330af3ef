/* The simulated CUDA driver: libcuda.so.1.
 *
 * A faithful-enough model of the driver API's memory behaviour for tests on
 * machines without a GPU: devices, per-thread context stacks, primary
 * contexts, device memory accounting with allocation granularity, fake but
 * unique device addresses that are reused first-fit after a free, virtual
 * memory management, stream-ordered allocation, arrays, and
 * cuGetProcAddress(_v2) with the real driver's version selection.
 *
 * Build note: __CUDA_API_VERSION_INTERNAL turns off cuda.h's
 * "#define cuMemAlloc cuMemAlloc_v2" mapping so that every variant (legacy v1,
 * _v2, ..., _ptsz/_ptds) can be defined under its own exported name. */
#define __CUDA_API_VERSION_INTERNAL 1

#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop

#include "sim_common.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Small containers                                                          */

/* Open-addressing hash map uintptr_t -> void* (key 0 is reserved). */
struct hmap {
    uintptr_t *keys;
    void **vals;
    size_t cap, n;
};

static size_t hm_slot(uintptr_t k, size_t cap)
{
    unsigned long long x = k;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static void *hm_get(const struct hmap *m, uintptr_t k)
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

static int hm_put(struct hmap *m, uintptr_t k, void *v)
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

static void *hm_del(struct hmap *m, uintptr_t k)
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
/* Objects                                                                   */

enum { O_CTX = 1, O_STREAM, O_EVENT, O_POOL, O_ARRAY, O_MIPMAP, O_VMM };

struct sim_ctx;

struct obj {
    int type;
    struct sim_ctx *ctx; /* owner, or NULL */
};

struct sim_ctx {
    struct obj hdr;
    _Atomic int alive;
    int phys;            /* physical (configured) device index */
    int primary;
    unsigned flags;
    int refcount;        /* primary only */
    int attached;        /* cuCtxAttach calls not yet detached (not primary) */
    unsigned long long id;
    size_t limits[CU_LIMIT_MAX > 16 ? CU_LIMIT_MAX : 16];
};

struct sim_stream {
    struct obj hdr;
    unsigned flags;
    int priority;
};

struct sim_event {
    struct obj hdr;
    unsigned flags;
};

struct sim_pool {
    struct obj hdr;
    int phys;            /* -1: host pool */
    int is_default;
    int destroyed;
    unsigned long long used, peak, threshold;
    int reuse[4];
};

struct sim_array {
    struct obj hdr;
    int phys;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    unsigned levels;     /* mipmapped: level count; plain: 0 */
    unsigned long long charge;
};

struct sim_vmm {
    struct obj hdr;
    int phys;            /* -1: host memory, not charged */
    unsigned long long size, charge;
    CUmemAllocationProp prop;
    int refs, maps;
};

/* A range of the fake device address space. */
enum { R_ALLOC = 1, R_RESERVE };

struct mapping {
    unsigned long long va, size, off;
    struct sim_vmm *h;
};

struct region {
    unsigned long long base, size;   /* address footprint */
    unsigned long long req;          /* bytes asked for */
    unsigned long long charge;       /* bytes charged to the device */
    unsigned long long id;
    int kind;
    int phys;
    int managed;
    struct sim_ctx *ctx;
    struct sim_pool *pool;
    struct mapping *maps;            /* R_RESERVE */
    size_t nmaps, capmaps;
};

struct ext {
    unsigned long long base, end;
};

struct zone {
    unsigned long long lo, hi;
    struct ext *ext;
    size_t n, cap;
};

/* Legacy (32-bit) allocations come from below 4 GiB; everything else from a
 * high range far from the usual heap and mmap areas. */
#define ZONE_LOW_LO 0x10000000ULL
#define ZONE_LOW_HI 0xF0000000ULL
#define ZONE_HIGH_LO 0x200000000000ULL
#define ZONE_HIGH_HI 0x700000000000ULL

#define CTX_STACK_MAX 128

static struct {
    pthread_mutex_t mu;
    _Atomic int inited;
    int init_done;
    CUresult init_rc;
    unsigned gen;                     /* bumped in a forked child */
    struct sim_config cfg;
    int nvis;
    int vis[SIM_MAX_DEVICES];         /* ordinal -> physical */
    int ord[SIM_MAX_DEVICES];         /* physical -> ordinal or -1 */
    unsigned long long used[SIM_MAX_DEVICES];
    int ctx_count[SIM_MAX_DEVICES];
    struct sim_ctx *primary[SIM_MAX_DEVICES];
    unsigned primary_flags[SIM_MAX_DEVICES];
    struct sim_pool *default_pool[SIM_MAX_DEVICES];
    struct sim_pool *current_pool[SIM_MAX_DEVICES];
    struct sim_state *st;
    int sdev[SIM_MAX_DEVICES];
    int slot;
    struct zone zone[2];
    struct region **live;
    size_t nlive, caplive;
    struct hmap objs;                 /* handle -> struct obj* */
    struct hmap host;                 /* host pointer -> size */
    unsigned long long next_id;
} G = {.mu = PTHREAD_MUTEX_INITIALIZER, .slot = -1};

static _Thread_local struct sim_ctx *tls_stack[CTX_STACK_MAX];
static _Thread_local int tls_depth;
static _Thread_local unsigned tls_gen;

#define LOCK() pthread_mutex_lock(&G.mu)
#define UNLOCK() pthread_mutex_unlock(&G.mu)
#define INITED() atomic_load_explicit(&G.inited, memory_order_acquire)
#define NEED_INIT()                                  \
    do {                                             \
        if (!INITED())                               \
            return CUDA_ERROR_NOT_INITIALIZED;       \
    } while (0)

static unsigned long long round_up(unsigned long long v, unsigned long long a)
{
    return (v + a - 1) / a * a;
}

/* ------------------------------------------------------------------------ */
/* Address space                                                             */

static int zone_init(struct zone *z, unsigned long long lo, unsigned long long hi)
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
static int zone_take(struct zone *z, unsigned long long size, unsigned long long align,
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

static void zone_give(struct zone *z, unsigned long long base, unsigned long long size)
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

static struct zone *zone_of(unsigned long long addr)
{
    return addr < ZONE_LOW_HI ? &G.zone[0] : &G.zone[1];
}

/* Index of the first live region with base >= addr. */
static size_t live_lower(unsigned long long addr)
{
    size_t lo = 0, hi = G.nlive;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (G.live[mid]->base < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int live_insert(struct region *r)
{
    if (G.nlive == G.caplive) {
        size_t ncap = G.caplive ? G.caplive * 2 : 256;
        struct region **nl = realloc(G.live, ncap * sizeof *nl);
        if (!nl)
            return -1;
        G.live = nl;
        G.caplive = ncap;
    }
    size_t i = live_lower(r->base);
    memmove(&G.live[i + 1], &G.live[i], (G.nlive - i) * sizeof *G.live);
    G.live[i] = r;
    G.nlive++;
    return 0;
}

static void live_remove(struct region *r)
{
    size_t i = live_lower(r->base);
    if (i < G.nlive && G.live[i] == r) {
        memmove(&G.live[i], &G.live[i + 1], (G.nlive - i - 1) * sizeof *G.live);
        G.nlive--;
    }
}

static struct region *live_exact(unsigned long long addr)
{
    size_t i = live_lower(addr);
    return i < G.nlive && G.live[i]->base == addr ? G.live[i] : NULL;
}

static struct region *live_containing(unsigned long long addr)
{
    size_t i = live_lower(addr + 1);
    if (!i)
        return NULL;
    struct region *r = G.live[i - 1];
    return addr - r->base < r->size ? r : NULL;
}

static struct mapping *mapping_containing(struct region *r, unsigned long long addr)
{
    for (size_t i = 0; i < r->nmaps; i++)
        if (addr - r->maps[i].va < r->maps[i].size)
            return &r->maps[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Accounting                                                                */

static void state_publish(int phys)
{
    if (G.st && G.slot >= 0 && G.sdev[phys] >= 0) {
        struct sim_state_slot *s = &G.st->f->slots[G.slot];
        atomic_store(&s->used[G.sdev[phys]], G.used[phys]);
        atomic_store(&s->contexts[G.sdev[phys]], (unsigned)G.ctx_count[phys]);
    }
}

/* Bytes used on the device by everyone this simulator can see. */
static unsigned long long device_used(int phys)
{
    if (G.st && G.sdev[phys] >= 0)
        return sim_state_used(G.st, G.sdev[phys]);
    return G.used[phys];
}

static unsigned long long device_free(int phys)
{
    unsigned long long total = G.cfg.memory[phys];
    unsigned long long busy = G.cfg.other_used[phys] + device_used(phys);
    return busy >= total ? 0 : total - busy;
}

/* Called with G.mu held. */
static CUresult charge(int phys, unsigned long long bytes)
{
    if (phys < 0 || !bytes)
        return CUDA_SUCCESS;
    if (G.st)
        sim_state_lock(G.st);
    CUresult rc = CUDA_SUCCESS;
    if (bytes > device_free(phys)) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        G.used[phys] += bytes;
        state_publish(phys);
    }
    if (G.st)
        sim_state_unlock(G.st);
    return rc;
}

static void uncharge(int phys, unsigned long long bytes)
{
    if (phys < 0 || !bytes)
        return;
    G.used[phys] = G.used[phys] >= bytes ? G.used[phys] - bytes : 0;
    state_publish(phys);
}

/* ------------------------------------------------------------------------ */
/* Handles and contexts                                                      */

static void *obj_get(const void *h, int type)
{
    struct obj *o = hm_get(&G.objs, (uintptr_t)h);
    return o && o->type == type ? o : NULL;
}

static int obj_add(void *o)
{
    return hm_put(&G.objs, (uintptr_t)o, o);
}

static struct sim_ctx *tls_top(void)
{
    if (tls_gen != G.gen) {
        tls_gen = G.gen;
        tls_depth = 0;
    }
    return tls_depth ? tls_stack[tls_depth - 1] : NULL;
}

static CUresult cur_ctx(struct sim_ctx **out)
{
    NEED_INIT();
    struct sim_ctx *c = tls_top();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!atomic_load(&c->alive))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = c;
    return CUDA_SUCCESS;
}

static int dev_phys(CUdevice d)
{
    return d >= 0 && d < G.nvis ? G.vis[d] : -1;
}

static void ctx_defaults(struct sim_ctx *c)
{
    c->limits[CU_LIMIT_STACK_SIZE] = 1024;
    c->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
    c->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
    c->limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
    c->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
    c->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
    c->limits[CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = 0;
    c->limits[CU_LIMIT_SHMEM_SIZE] = 232448;
}

static struct sim_ctx *ctx_new(int phys, unsigned flags, int primary)
{
    struct sim_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->hdr.type = O_CTX;
    c->phys = phys;
    c->flags = flags;
    c->primary = primary;
    c->id = ++G.next_id;
    ctx_defaults(c);
    if (obj_add(c)) {
        free(c);
        return NULL;
    }
    return c; /* never freed: stale handles must stay recognisable */
}

/* The first context of a device in this process takes CGPU_SIM_CTX_OVERHEAD. */
static CUresult ctx_activate(struct sim_ctx *c)
{
    int phys = c->phys;
    if (G.ctx_count[phys] == 0) {
        CUresult rc = charge(phys, G.cfg.ctx_overhead);
        if (rc)
            return rc;
    }
    G.ctx_count[phys]++;
    state_publish(phys);
    atomic_store(&c->alive, 1);
    return CUDA_SUCCESS;
}

static void region_free(struct region *r);
static void vmm_maybe_destroy(struct sim_vmm *h);

/* Destroying a context frees everything allocated in it, as the driver does. */
static void ctx_teardown(struct sim_ctx *c)
{
    for (size_t i = G.nlive; i-- > 0;) {
        struct region *r = G.live[i];
        if (r->kind == R_ALLOC && r->ctx == c)
            region_free(r);
    }
    size_t n = 0;
    void **doomed = malloc((G.objs.n + 1) * sizeof *doomed);
    for (size_t i = 0; doomed && i < G.objs.cap; i++) {
        struct obj *o = G.objs.vals[i];
        if (o && o->ctx == c && o->type != O_CTX)
            doomed[n++] = o;
    }
    for (size_t i = 0; i < n; i++) {
        struct obj *o = doomed[i];
        hm_del(&G.objs, (uintptr_t)o);
        if (o->type == O_ARRAY || o->type == O_MIPMAP)
            uncharge(((struct sim_array *)o)->phys, ((struct sim_array *)o)->charge);
        free(o);
    }
    free(doomed);
    atomic_store(&c->alive, 0);
    int phys = c->phys;
    if (--G.ctx_count[phys] == 0)
        uncharge(phys, G.cfg.ctx_overhead);
    state_publish(phys);
}

/* ------------------------------------------------------------------------ */
/* Initialisation                                                            */

static void reset_after_fork(void)
{
    /* The child starts with no driver state, as if CUDA had never been
     * initialised in it (the parent's structures are simply dropped). */
    unsigned gen = G.gen;
    memset(&G, 0, sizeof G);
    pthread_mutex_init(&G.mu, NULL);
    G.gen = gen + 1;
    G.slot = -1;
}

/* A process that exits gives its memory back at once, as on a real GPU
 * (readers would also skip the dead pid, but not across pid namespaces). */
__attribute__((destructor)) static void release_at_exit(void)
{
    if (!G.st || G.slot < 0 || G.st->self_pid != getpid())
        return;
    struct sim_state_slot *s = &G.st->f->slots[G.slot];
    for (int d = 0; d < SIM_STATE_DEVICES; d++) {
        atomic_store(&s->used[d], 0);
        atomic_store(&s->contexts[d], 0);
    }
    atomic_store(&s->pid, 0);
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void install_atfork(void)
{
    pthread_atfork(NULL, NULL, reset_after_fork);
}

/* CUDA_VISIBLE_DEVICES, as the driver reads it: indices or UUID prefixes,
 * the list ending at the first entry that names no device. */
static void visible_devices(void)
{
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    for (int i = 0; i < SIM_MAX_DEVICES; i++)
        G.ord[i] = -1;
    G.nvis = 0;
    if (!env) {
        for (int i = 0; i < G.cfg.ndev; i++) {
            G.vis[G.nvis] = i;
            G.ord[i] = G.nvis++;
        }
        return;
    }
    const char *p = env;
    while (*p && G.nvis < G.cfg.ndev) {
        char tok[SIM_UUID_LEN + 8];
        size_t len = strcspn(p, ",");
        size_t b = 0;
        while (b < len && (p[b] == ' ' || p[b] == '\t'))
            b++;
        size_t e = len;
        while (e > b && (p[e - 1] == ' ' || p[e - 1] == '\t'))
            e--;
        if (e - b == 0 || e - b >= sizeof tok)
            break;
        memcpy(tok, p + b, e - b);
        tok[e - b] = 0;
        int phys = -1;
        if (tok[0] >= '0' && tok[0] <= '9') {
            char *end;
            long v = strtol(tok, &end, 10);
            if (*end || v < 0 || v >= G.cfg.ndev)
                break;
            phys = (int)v;
        } else if (!strncasecmp(tok, "GPU-", 4)) {
            int matches = 0;
            for (int i = 0; i < G.cfg.ndev; i++)
                if (!strncasecmp(G.cfg.uuid[i], tok, strlen(tok))) {
                    phys = i;
                    matches++;
                }
            if (matches != 1)
                break;
        } else {
            break;
        }
        if (G.ord[phys] >= 0)
            break;
        G.vis[G.nvis] = phys;
        G.ord[phys] = G.nvis++;
        p += len;
        if (*p == ',')
            p++;
    }
}

SIM_API CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&atfork_once, install_atfork);
    LOCK();
    if (G.init_done) {
        CUresult rc = G.init_rc;
        UNLOCK();
        return rc;
    }
    G.init_done = 1;
    CUresult rc = CUDA_SUCCESS;
    if (sim_config_load(&G.cfg)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    visible_devices();
    if (!G.nvis) {
        rc = CUDA_ERROR_NO_DEVICE;
        goto out;
    }
    for (int i = 0; i < SIM_MAX_DEVICES; i++)
        G.sdev[i] = -1;
    G.slot = -1;
    if (G.cfg.state[0]) {
        G.st = sim_state_open(G.cfg.state);
        if (!G.st) {
            rc = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
        for (int i = 0; i < G.cfg.ndev; i++)
            G.sdev[i] = sim_state_device(G.st, G.cfg.uuid[i]);
        G.slot = sim_state_claim(G.st);
        if (G.slot < 0) {
            fprintf(stderr, "cgpu-sim: CGPU_SIM_STATE: %s: no free process slot\n", G.cfg.state);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
    }
    if (zone_init(&G.zone[0], ZONE_LOW_LO, ZONE_LOW_HI) ||
        zone_init(&G.zone[1], ZONE_HIGH_LO, ZONE_HIGH_HI)) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    atomic_store_explicit(&G.inited, 1, memory_order_release);
out:
    G.init_rc = rc;
    UNLOCK();
    return rc;
}

SIM_API CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    if (INITED()) {
        *driverVersion = G.cfg.driver_version;
        return CUDA_SUCCESS;
    }
    int v = 13000;
    const char *e = getenv("CGPU_SIM_DRIVER_VERSION");
    if (e) {
        char *end;
        long x = strtol(e, &end, 10);
        if (*e && !*end && x >= 1000 && x <= 999990)
            v = (int)x;
    }
    *driverVersion = v;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

static const struct {
    int code;
    const char *name, *text;
} errtab[] = {
#define SIM_ERR(c, n, t) {c, n, t},
#include "sim_errors.inc"
#undef SIM_ERR
};

SIM_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errtab / sizeof *errtab; i++)
        if (errtab[i].code == (int)error) {
            *pStr = errtab[i].text;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errtab / sizeof *errtab; i++)
        if (errtab[i].code == (int)error) {
            *pStr = errtab[i].name;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

static int trace_on(void);

SIM_API CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    *ppExportTable = NULL;
    if (trace_on()) {
        const unsigned char *b = (const unsigned char *)pExportTableId->bytes;
        fprintf(stderr, "cgpu-sim: cuGetExportTable(");
        for (int i = 0; i < 16; i++)
            fprintf(stderr, "%02x", b[i]);
        fprintf(stderr, ") = %d\n", (int)CUDA_ERROR_NOT_SUPPORTED);
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ------------------------------------------------------------------------ */
/* Devices                                                                   */

SIM_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    NEED_INIT();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= G.nvis)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetCount(int *count)
{
    NEED_INIT();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = G.nvis;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    NEED_INIT();
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev_phys(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", G.cfg.name);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    NEED_INIT();
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    memcpy(uuid->bytes, G.cfg.uuid_bytes[phys], 16);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid_v2(uuid, dev);
}

SIM_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    NEED_INIT();
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = G.cfg.memory[phys];
    return CUDA_SUCCESS;
}

static unsigned int sat32(unsigned long long v)
{
    return v > UINT_MAX ? UINT_MAX : (unsigned int)v;
}

SIM_API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    size_t b;
    if (!bytes)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = cuDeviceTotalMem_v2(&b, dev);
    if (!rc)
        *bytes = sat32(b);
    return rc;
}

static int attribute(CUdevice_attribute a, int phys)
{
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: return 0;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH: return 131072;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH: return 131072;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT: return 65536;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH: return 16384;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT: return 16384;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH: return 16384;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return (int)SIM_PCI_BUS(phys);
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: return 0;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 52428800;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 3;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 233472;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: return 0;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: return phys;
    case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: return 0;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: return 2;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: return 0;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
    case CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES: return 0;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES: return 0;
    case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST: return 0;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED: return 0;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED: return 0;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
    case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: return 32505856;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE: return 134213632;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS: return 1;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING: return 100;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES: return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED: return 1;
    case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT: return 4;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID: return -1;
    default: return 0;
    }
}

SIM_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    NEED_INIT();
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if ((int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    *pi = attribute(attrib, phys);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    NEED_INIT();
    if (!major || !minor)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev_phys(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *major = 9;
    *minor = 0;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    NEED_INIT();
    if (!canAccessPeer)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev_phys(dev) < 0 || dev_phys(peerDev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *canAccessPeer = dev != peerDev;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    NEED_INIT();
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(pciBusId, (size_t)len, "%04X:%02X:%02X.0", 0u, SIM_PCI_BUS(phys), 0u);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    NEED_INIT();
    unsigned d, b, s;
    if (!dev || !pciBusId || sim_parse_busid(pciBusId, &d, &b, &s))
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < G.nvis; i++)
        if (d == 0 && s == 0 && b == SIM_PCI_BUS(G.vis[i])) {
            *dev = i;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_DEVICE;
}

/* ------------------------------------------------------------------------ */
/* Primary contexts                                                          */

#define CTX_FLAGS_VALID 0xffu

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    NEED_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    struct sim_ctx *c = G.primary[phys];
    if (!c) {
        c = G.primary[phys] = ctx_new(phys, G.primary_flags[phys], 1);
        if (!c) {
            UNLOCK();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (c->refcount == 0) {
        c->flags = G.primary_flags[phys];
        CUresult rc = ctx_activate(c);
        if (rc) {
            UNLOCK();
            return rc;
        }
    }
    c->refcount++;
    *pctx = (CUcontext)c;
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    NEED_INIT();
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    struct sim_ctx *c = G.primary[phys];
    if (!c || c->refcount == 0) {
        UNLOCK();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (--c->refcount == 0)
        ctx_teardown(c);
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}

SIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    NEED_INIT();
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    struct sim_ctx *c = G.primary[phys];
    if (c && c->refcount > 0) {
        c->refcount = 0;
        ctx_teardown(c);
    }
    G.primary_flags[phys] = 0;
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    NEED_INIT();
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    *flags = G.primary_flags[phys];
    *active = G.primary[phys] && G.primary[phys]->refcount > 0;
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    NEED_INIT();
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (flags & ~CTX_FLAGS_VALID)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    G.primary_flags[phys] = flags;
    if (G.primary[phys])
        G.primary[phys]->flags = flags;
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    NEED_INIT();
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (G.primary[phys] && G.primary[phys]->refcount > 0)
        return CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE;
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

/* ------------------------------------------------------------------------ */
/* Context stack                                                             */

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    NEED_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~CTX_FLAGS_VALID)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    tls_top();
    if (tls_depth >= CTX_STACK_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_ctx *c = ctx_new(phys, flags, 0);
    if (!c) {
        UNLOCK();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult rc = ctx_activate(c);
    UNLOCK();
    if (rc)
        return rc;
    tls_stack[tls_depth++] = c;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

SIM_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

SIM_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                unsigned int flags, CUdevice dev)
{
    if (numParams < 0 || (numParams > 0 && !paramsArray))
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return ctx_create(pctx, flags, dev);
}

SIM_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                unsigned int flags, CUdevice dev)
{
    if (ctxCreateParams && ctxCreateParams->numExecAffinityParams < 0)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return ctx_create(pctx, flags, dev);
}

/* A context handle this process created (alive or not). */
static struct sim_ctx *ctx_lookup(CUcontext ctx)
{
    return obj_get(ctx, O_CTX);
}

SIM_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    NEED_INIT();
    LOCK();
    struct sim_ctx *c = ctx_lookup(ctx);
    if (!c || c->primary || !atomic_load(&c->alive)) {
        UNLOCK();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    ctx_teardown(c);
    UNLOCK();
    if (tls_top() == c)
        tls_depth--;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

/* Legacy usage counting: attach adds one to the current context's count, detach
 * takes one off and destroys the context when it falls to zero. */
SIM_API CUresult cuCtxAttach(CUcontext *pctx, unsigned int flags)
{
    NEED_INIT();
    if (!pctx || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_ctx *c = tls_top();
    if (!c || c->primary || !atomic_load(&c->alive)) {
        UNLOCK();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    c->attached++;
    UNLOCK();
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxDetach(CUcontext ctx)
{
    NEED_INIT();
    LOCK();
    struct sim_ctx *c = ctx_lookup(ctx);
    if (!c || c->primary || !atomic_load(&c->alive)) {
        UNLOCK();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (c->attached > 0) {
        c->attached--;
        UNLOCK();
        return CUDA_SUCCESS;
    }
    ctx_teardown(c);
    UNLOCK();
    if (tls_top() == c)
        tls_depth--;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    NEED_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)tls_top();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    NEED_INIT();
    struct sim_ctx *top = tls_top();
    if (!ctx) {
        if (top)
            tls_depth--;
        return CUDA_SUCCESS;
    }
    LOCK();
    struct sim_ctx *c = ctx_lookup(ctx);
    int ok = c && atomic_load(&c->alive);
    UNLOCK();
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (tls_depth)
        tls_stack[tls_depth - 1] = c;
    else
        tls_stack[tls_depth++] = c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    NEED_INIT();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    tls_top();
    if (tls_depth >= CTX_STACK_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_ctx *c = ctx_lookup(ctx);
    int ok = c && atomic_load(&c->alive);
    UNLOCK();
    if (!ok)
        return CUDA_ERROR_INVALID_CONTEXT;
    tls_stack[tls_depth++] = c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPushCurrent(CUcontext ctx)
{
    return cuCtxPushCurrent_v2(ctx);
}

SIM_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    NEED_INIT();
    struct sim_ctx *top = tls_top();
    if (!top)
        return CUDA_ERROR_INVALID_CONTEXT;
    tls_depth--;
    if (pctx)
        *pctx = (CUcontext)top;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    return cuCtxPopCurrent_v2(pctx);
}

/* ctx == NULL means the current context. */
static CUresult ctx_or_current(CUcontext ctx, struct sim_ctx **out)
{
    if (!ctx)
        return cur_ctx(out);
    NEED_INIT();
    LOCK();
    struct sim_ctx *c = ctx_lookup(ctx);
    UNLOCK();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!atomic_load(&c->alive))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    struct sim_ctx *c;
    CUresult rc = ctx_or_current(ctx, &c);
    if (rc)
        return rc;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = G.ord[c->phys];
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetDevice(CUdevice *device)
{
    return cuCtxGetDevice_v2(device, NULL);
}

SIM_API CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    struct sim_ctx *c;
    return ctx_or_current(ctx, &c);
}

SIM_API CUresult cuCtxSynchronize(void)
{
    return cuCtxSynchronize_v2(NULL);
}

SIM_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    struct sim_ctx *c;
    CUresult rc = ctx_or_current(ctx, &c);
    if (rc)
        return rc;
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = 3020;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetFlags(unsigned int *flags)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    struct sim_ctx *c;
    CUresult rc = ctx_or_current(ctx, &c);
    if (rc)
        return rc;
    if (!ctxId)
        return CUDA_ERROR_INVALID_VALUE;
    *ctxId = c->id;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (leastPriority)
        *leastPriority = 0;
    if (greatestPriority)
        *greatestPriority = -5;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!pvalue)
        return CUDA_ERROR_INVALID_VALUE;
    if ((int)limit < 0 || limit >= CU_LIMIT_MAX)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    *pvalue = c->limits[limit];
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if ((int)limit < 0 || limit >= CU_LIMIT_MAX || limit == CU_LIMIT_SHMEM_SIZE ||
        limit == CU_LIMIT_CIG_ENABLED)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    c->limits[limit] = value;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Device memory                                                             */

/* Allocate `bytes` on physical device `phys` (-1: host memory that still gets
 * a device address, e.g. a host-located pool).  G.mu held. */
static CUresult mem_alloc_locked(struct sim_ctx *ctx, int phys, unsigned long long bytes,
                                 int low, int managed, struct sim_pool *pool,
                                 CUdeviceptr *out)
{
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long gran = G.cfg.granularity;
    unsigned long long align = gran > 512 ? gran : 512;
    if (bytes > (1ULL << 48))
        return CUDA_ERROR_OUT_OF_MEMORY;
    unsigned long long chg = phys >= 0 ? round_up(bytes, gran) : 0;
    unsigned long long foot = round_up(bytes, align);
    struct region *r = calloc(1, sizeof *r);
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = charge(phys, chg);
    if (rc) {
        free(r);
        return rc;
    }
    unsigned long long addr;
    struct zone *z = &G.zone[low ? 0 : 1];
    if (zone_take(z, foot, align, 0, &addr)) {
        uncharge(phys, chg);
        free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->base = addr;
    r->size = foot;
    r->req = bytes;
    r->charge = chg;
    r->kind = R_ALLOC;
    r->phys = phys;
    r->managed = managed;
    r->ctx = ctx;
    r->pool = pool;
    r->id = ++G.next_id;
    if (live_insert(r)) {
        zone_give(z, addr, foot);
        uncharge(phys, chg);
        free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (pool) {
        pool->used += foot;
        if (pool->used > pool->peak)
            pool->peak = pool->used;
    }
    *out = addr;
    return CUDA_SUCCESS;
}

static CUresult mem_alloc(unsigned long long bytes, int low, int managed, CUdeviceptr *out)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    rc = mem_alloc_locked(c, c->phys, bytes, low, managed, NULL, out);
    UNLOCK();
    return rc;
}

static void region_free(struct region *r)
{
    uncharge(r->phys, r->charge);
    if (r->pool && r->pool->used >= r->size)
        r->pool->used -= r->size;
    live_remove(r);
    zone_give(zone_of(r->base), r->base, r->size);
    free(r->maps);
    free(r);
}

static CUresult mem_free(CUdeviceptr dptr)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!dptr)
        return CUDA_SUCCESS;
    LOCK();
    struct region *r = live_exact(dptr);
    if (!r || r->kind != R_ALLOC) {
        UNLOCK();
        return CUDA_ERROR_INVALID_VALUE;
    }
    region_free(r);
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return mem_alloc(bytesize, 0, 0, dptr);
}

SIM_API CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    CUdeviceptr p = 0;
    if (!dptr)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = mem_alloc(bytesize, 1, 0, &p);
    if (!rc)
        *dptr = (CUdeviceptr_v1)p;
    return rc;
}

static CUresult alloc_pitch(CUdeviceptr *dptr, size_t *pPitch, size_t width, size_t height,
                            unsigned int elem, int low)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!dptr || !pPitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long pitch = round_up(width, 512);
    if (pitch < width || height > (1ULL << 48) / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    LOCK();
    rc = mem_alloc_locked(c, c->phys, pitch * height, low, 0, NULL, dptr);
    UNLOCK();
    if (!rc)
        *pPitch = pitch;
    return rc;
}

SIM_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes)
{
    return alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes, 0);
}

SIM_API CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                 unsigned int WidthInBytes, unsigned int Height,
                                 unsigned int ElementSizeBytes)
{
    CUdeviceptr p = 0;
    size_t pitch = 0;
    if (!dptr || !pPitch)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = alloc_pitch(&p, &pitch, WidthInBytes, Height, ElementSizeBytes, 1);
    if (!rc) {
        *dptr = (CUdeviceptr_v1)p;
        *pPitch = (unsigned int)pitch;
    }
    return rc;
}

SIM_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (INITED() && flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    return mem_alloc(bytesize, 0, 1, dptr);
}

SIM_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    return mem_free(dptr);
}

SIM_API CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    return mem_free(dptr);
}

static CUresult get_info(unsigned long long *freep, unsigned long long *totalp)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    LOCK();
    if (G.st)
        sim_state_lock(G.st);
    *freep = device_free(c->phys);
    *totalp = G.cfg.memory[c->phys];
    if (G.st)
        sim_state_unlock(G.st);
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    unsigned long long f, t;
    CUresult rc = get_info(&f, &t);
    if (rc)
        return rc;
    if (!free || !total)
        return CUDA_ERROR_INVALID_VALUE;
    *free = f;
    *total = t;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    unsigned long long f, t;
    CUresult rc = get_info(&f, &t);
    if (rc)
        return rc;
    if (!free || !total)
        return CUDA_ERROR_INVALID_VALUE;
    *free = sat32(f);
    *total = sat32(t);
    return CUDA_SUCCESS;
}

static CUresult addr_range(unsigned long long *pbase, unsigned long long *psize,
                           unsigned long long dptr)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    LOCK();
    struct region *r = live_containing(dptr);
    rc = CUDA_ERROR_NOT_FOUND;
    if (r && r->kind == R_ALLOC) {
        *pbase = r->base;
        *psize = r->req;
        rc = CUDA_SUCCESS;
    } else if (r) {
        struct mapping *m = mapping_containing(r, dptr);
        if (m) {
            *pbase = m->va;
            *psize = m->size;
            rc = CUDA_SUCCESS;
        }
    }
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    unsigned long long b, s;
    CUresult rc = addr_range(&b, &s, dptr);
    if (rc)
        return rc;
    if (pbase)
        *pbase = b;
    if (psize)
        *psize = s;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAddressRange(CUdeviceptr_v1 *pbase, unsigned int *psize,
                                      CUdeviceptr_v1 dptr)
{
    unsigned long long b, s;
    CUresult rc = addr_range(&b, &s, dptr);
    if (rc)
        return rc;
    if (pbase)
        *pbase = (CUdeviceptr_v1)b;
    if (psize)
        *psize = sat32(s);
    return CUDA_SUCCESS;
}

/* ---- Host memory: real memory, never charged to a device ---- */

static CUresult host_alloc(void **pp, size_t bytesize)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!pp || !bytesize)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytesize))
        return CUDA_ERROR_OUT_OF_MEMORY;
    LOCK();
    int err = hm_put(&G.host, (uintptr_t)p, (void *)(uintptr_t)bytesize);
    UNLOCK();
    if (err) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return host_alloc(pp, bytesize);
}

SIM_API CUresult cuMemAllocHost(void **pp, unsigned int bytesize)
{
    return host_alloc(pp, bytesize);
}

SIM_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    if (INITED() && (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                                         CU_MEMHOSTALLOC_WRITECOMBINED)))
        return CUDA_ERROR_INVALID_VALUE;
    return host_alloc(pp, bytesize);
}

SIM_API CUresult cuMemFreeHost(void *p)
{
    NEED_INIT();
    LOCK();
    void *had = hm_del(&G.host, (uintptr_t)p);
    UNLOCK();
    if (!had)
        return CUDA_ERROR_INVALID_VALUE;
    free(p);
    return CUDA_SUCCESS;
}

/* ---- Copies and sets: validated no-ops ---- */

/* [p, p+n) must lie in one live allocation or mapping.  G.mu held. */
static int dev_range_ok(unsigned long long p, unsigned long long n)
{
    struct region *r = live_containing(p);
    if (!r)
        return 0;
    if (r->kind == R_ALLOC)
        return p + n >= p && p + n <= r->base + r->size;
    struct mapping *m = mapping_containing(r, p);
    return m && p + n >= p && p + n <= m->va + m->size;
}

static int is_device_ptr(unsigned long long p)
{
    return live_containing(p) != NULL;
}

static CUresult stream_ctx(CUstream s, struct sim_ctx **out);

enum { M_HOST = 1, M_DEV = 2, M_ANY = 3 };

static CUresult copy_check(unsigned long long dst, int dkind, unsigned long long src, int skind,
                           unsigned long long n, CUstream stream, int use_stream)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    LOCK();
    if (use_stream)
        rc = stream_ctx(stream, &c);
    if (!rc && n) {
        if ((dkind == M_DEV && !dev_range_ok(dst, n)) ||
            (skind == M_DEV && !dev_range_ok(src, n)) || (dkind == M_HOST && !dst) ||
            (skind == M_HOST && !src))
            rc = CUDA_ERROR_INVALID_VALUE;
        if (dkind == M_ANY && is_device_ptr(dst) && !dev_range_ok(dst, n))
            rc = CUDA_ERROR_INVALID_VALUE;
        if (skind == M_ANY && is_device_ptr(src) && !dev_range_ok(src, n))
            rc = CUDA_ERROR_INVALID_VALUE;
        if ((dkind == M_ANY && !dst) || (skind == M_ANY && !src))
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    UNLOCK();
    return rc;
}

#define HP(p) ((unsigned long long)(uintptr_t)(p))

SIM_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{ return copy_check(dst, M_ANY, src, M_ANY, ByteCount, NULL, 0); }
SIM_API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{ return copy_check(dst, M_ANY, src, M_ANY, ByteCount, NULL, 0); }
SIM_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{ return copy_check(dst, M_ANY, src, M_ANY, ByteCount, hStream, 1); }
SIM_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{ return copy_check(dst, M_ANY, src, M_ANY, ByteCount, hStream, 1); }

SIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{ return copy_check(dstDevice, M_DEV, HP(srcHost), M_HOST, ByteCount, NULL, 0); }
SIM_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{ return copy_check(dstDevice, M_DEV, HP(srcHost), M_HOST, ByteCount, NULL, 0); }
SIM_API CUresult cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount)
{ return copy_check(dstDevice, M_DEV, HP(srcHost), M_HOST, ByteCount, NULL, 0); }

SIM_API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{ return copy_check(HP(dstHost), M_HOST, srcDevice, M_DEV, ByteCount, NULL, 0); }
SIM_API CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{ return copy_check(HP(dstHost), M_HOST, srcDevice, M_DEV, ByteCount, NULL, 0); }
SIM_API CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount)
{ return copy_check(HP(dstHost), M_HOST, srcDevice, M_DEV, ByteCount, NULL, 0); }

SIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{ return copy_check(dstDevice, M_DEV, srcDevice, M_DEV, ByteCount, NULL, 0); }
SIM_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{ return copy_check(dstDevice, M_DEV, srcDevice, M_DEV, ByteCount, NULL, 0); }
SIM_API CUresult cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice, unsigned int ByteCount)
{ return copy_check(dstDevice, M_DEV, srcDevice, M_DEV, ByteCount, NULL, 0); }

SIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                      CUstream hStream)
{ return copy_check(dstDevice, M_DEV, HP(srcHost), M_HOST, ByteCount, hStream, 1); }
SIM_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                           size_t ByteCount, CUstream hStream)
{ return copy_check(dstDevice, M_DEV, HP(srcHost), M_HOST, ByteCount, hStream, 1); }
SIM_API CUresult cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void *srcHost,
                                   unsigned int ByteCount, CUstream hStream)
{ return copy_check(dstDevice, M_DEV, HP(srcHost), M_HOST, ByteCount, hStream, 1); }

SIM_API CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{ return copy_check(HP(dstHost), M_HOST, srcDevice, M_DEV, ByteCount, hStream, 1); }
SIM_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                           CUstream hStream)
{ return copy_check(HP(dstHost), M_HOST, srcDevice, M_DEV, ByteCount, hStream, 1); }
SIM_API CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount,
                                   CUstream hStream)
{ return copy_check(HP(dstHost), M_HOST, srcDevice, M_DEV, ByteCount, hStream, 1); }

SIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{ return copy_check(dstDevice, M_DEV, srcDevice, M_DEV, ByteCount, hStream, 1); }
SIM_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                           size_t ByteCount, CUstream hStream)
{ return copy_check(dstDevice, M_DEV, srcDevice, M_DEV, ByteCount, hStream, 1); }
SIM_API CUresult cuMemcpyDtoDAsync(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                                   unsigned int ByteCount, CUstream hStream)
{ return copy_check(dstDevice, M_DEV, srcDevice, M_DEV, ByteCount, hStream, 1); }

static CUresult set_check(unsigned long long dst, unsigned long long n, CUstream s, int use_stream)
{
    if (n > (1ULL << 62))
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return copy_check(dst, M_DEV, 0, 0, n, s, use_stream);
}

SIM_API CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{ return set_check(dstDevice, N, NULL, 0); }
SIM_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{ return set_check(dstDevice, N, NULL, 0); }
SIM_API CUresult cuMemsetD8(CUdeviceptr_v1 dstDevice, unsigned char uc, unsigned int N)
{ return set_check(dstDevice, N, NULL, 0); }
SIM_API CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{ return set_check(dstDevice, 4ULL * N, NULL, 0); }
SIM_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{ return set_check(dstDevice, 4ULL * N, NULL, 0); }
SIM_API CUresult cuMemsetD32(CUdeviceptr_v1 dstDevice, unsigned int ui, unsigned int N)
{ return set_check(dstDevice, 4ULL * N, NULL, 0); }
SIM_API CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{ return set_check(dstDevice, N, hStream, 1); }
SIM_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                      CUstream hStream)
{ return set_check(dstDevice, N, hStream, 1); }
SIM_API CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{ return set_check(dstDevice, 4ULL * N, hStream, 1); }
SIM_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                       CUstream hStream)
{ return set_check(dstDevice, 4ULL * N, hStream, 1); }

SIM_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    NEED_INIT();
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct region *r = live_containing(ptr);
    if (!r) {
        /* Host memory from cuMemAllocHost (looked up by its start). */
        int host = hm_get(&G.host, (uintptr_t)ptr) != NULL;
        UNLOCK();
        if (!host)
            return CUDA_ERROR_INVALID_VALUE;
        switch (attribute) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned int *)data = CU_MEMORYTYPE_HOST; break;
        case CU_POINTER_ATTRIBUTE_HOST_POINTER: *(void **)data = (void *)(uintptr_t)ptr; break;
        case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; break;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned int *)data = 0; break;
        case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = 1; break;
        default: return CUDA_ERROR_INVALID_VALUE;
        }
        return CUDA_SUCCESS;
    }
    unsigned long long base = r->base, size = r->req;
    int phys = r->phys;
    struct mapping *m = NULL;
    if (r->kind == R_RESERVE) {
        m = mapping_containing(r, ptr);
        if (!m) {
            UNLOCK();
            return CUDA_ERROR_INVALID_VALUE;
        }
        base = m->va;
        size = m->size;
        phys = m->h->phys;
    }
    CUresult rc = CUDA_SUCCESS;
    switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data = (CUcontext)r->ctx; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned int *)data = CU_MEMORYTYPE_DEVICE; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: rc = CUDA_ERROR_INVALID_VALUE; break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: *(int *)data = 0; break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = r->id; break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned int *)data = (unsigned)r->managed; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = phys >= 0 ? G.ord[phys] : -1; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = base; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = size; break;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = 1; break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: *(CUdeviceptr *)data = base; break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: *(size_t *)data = size; break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(CUmemoryPool *)data = (CUmemoryPool)r->pool; break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *(unsigned int *)data = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE; break;
    default: rc = CUDA_ERROR_INVALID_VALUE; break;
    }
    UNLOCK();
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Virtual memory management                                                 */

/* prop->location -> physical device, -1 for host locations; -2 invalid. */
static int location_phys(const CUmemLocation *loc, CUresult *err)
{
    switch (loc->type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: {
        int phys = dev_phys(loc->id);
        if (phys < 0) {
            *err = CUDA_ERROR_INVALID_DEVICE;
            return -2;
        }
        return phys;
    }
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        return -1;
    default:
        *err = CUDA_ERROR_INVALID_VALUE;
        return -2;
    }
}

SIM_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags option)
{
    NEED_INIT();
    if (!granularity || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED && prop->type != CU_MEM_ALLOCATION_TYPE_MANAGED)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult err = CUDA_SUCCESS;
    if (location_phys(&prop->location, &err) == -2)
        return err;
    *granularity = G.cfg.granularity;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags)
{
    NEED_INIT();
    if (!handle || !prop || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED && prop->type != CU_MEM_ALLOCATION_TYPE_MANAGED)
        return CUDA_ERROR_INVALID_VALUE;
    if (!size || size % G.cfg.granularity)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    int phys = location_phys(&prop->location, &rc);
    if (phys == -2)
        return rc;
    struct sim_vmm *h = calloc(1, sizeof *h);
    if (!h)
        return CUDA_ERROR_OUT_OF_MEMORY;
    h->hdr.type = O_VMM;
    h->phys = phys;
    h->size = size;
    h->charge = phys >= 0 ? size : 0;
    h->prop = *prop;
    h->refs = 1;
    LOCK();
    rc = charge(phys, h->charge);
    if (!rc && obj_add(h)) {
        uncharge(phys, h->charge);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    UNLOCK();
    if (rc) {
        free(h);
        return rc;
    }
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
    return CUDA_SUCCESS;
}

/* The physical memory goes when no handle reference and no mapping is left. */
static void vmm_maybe_destroy(struct sim_vmm *h)
{
    if (h->refs > 0 || h->maps > 0)
        return;
    hm_del(&G.objs, (uintptr_t)h);
    uncharge(h->phys, h->charge);
    free(h);
}

SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    NEED_INIT();
    LOCK();
    struct sim_vmm *h = obj_get((void *)(uintptr_t)handle, O_VMM);
    if (!h || h->refs <= 0) {
        UNLOCK();
        return CUDA_ERROR_INVALID_VALUE;
    }
    h->refs--;
    vmm_maybe_destroy(h);
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                        CUmemGenericAllocationHandle handle)
{
    NEED_INIT();
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_vmm *h = obj_get((void *)(uintptr_t)handle, O_VMM);
    if (h)
        *prop = h->prop;
    UNLOCK();
    return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags)
{
    NEED_INIT();
    unsigned long long gran = G.cfg.granularity;
    if (!ptr || !size || size % gran || flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (alignment & (alignment - 1))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long align = alignment > gran ? alignment : gran;
    if (align < 512)
        align = 512;
    struct region *r = calloc(1, sizeof *r);
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    LOCK();
    unsigned long long at;
    if (zone_take(&G.zone[1], size, align, addr, &at)) {
        UNLOCK();
        free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->base = at;
    r->size = size;
    r->req = size;
    r->kind = R_RESERVE;
    r->phys = -1;
    r->id = ++G.next_id;
    if (live_insert(r)) {
        zone_give(&G.zone[1], at, size);
        UNLOCK();
        free(r);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    UNLOCK();
    *ptr = at;
    return CUDA_SUCCESS;
}

static void unmap_at(struct region *r, size_t i)
{
    struct sim_vmm *h = r->maps[i].h;
    memmove(&r->maps[i], &r->maps[i + 1], (r->nmaps - i - 1) * sizeof *r->maps);
    r->nmaps--;
    h->maps--;
    vmm_maybe_destroy(h);
}

SIM_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    NEED_INIT();
    LOCK();
    struct region *r = live_exact(ptr);
    if (!r || r->kind != R_RESERVE || r->size != size) {
        UNLOCK();
        return CUDA_ERROR_INVALID_VALUE;
    }
    while (r->nmaps)
        unmap_at(r, r->nmaps - 1);
    live_remove(r);
    zone_give(&G.zone[1], r->base, r->size);
    free(r->maps);
    free(r);
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    NEED_INIT();
    if (!size || flags || size % G.cfg.granularity || offset % G.cfg.granularity)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    struct sim_vmm *h = obj_get((void *)(uintptr_t)handle, O_VMM);
    struct region *r = live_containing(ptr);
    if (!h || h->refs <= 0 || !r || r->kind != R_RESERVE)
        goto out;
    if (ptr + size < ptr || ptr + size > r->base + r->size || offset + size > h->size ||
        offset + size < offset)
        goto out;
    for (size_t i = 0; i < r->nmaps; i++)
        if (ptr < r->maps[i].va + r->maps[i].size && r->maps[i].va < ptr + size) {
            rc = CUDA_ERROR_ALREADY_MAPPED;
            goto out;
        }
    if (r->nmaps == r->capmaps) {
        size_t ncap = r->capmaps ? r->capmaps * 2 : 4;
        struct mapping *nm = realloc(r->maps, ncap * sizeof *nm);
        if (!nm) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        r->maps = nm;
        r->capmaps = ncap;
    }
    r->maps[r->nmaps++] = (struct mapping){ptr, size, offset, h};
    h->maps++;
    rc = CUDA_SUCCESS;
out:
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    NEED_INIT();
    if (!size)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct region *r = live_containing(ptr);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (!r || r->kind != R_RESERVE || ptr + size > r->base + r->size)
        goto out;
    unsigned long long end = ptr + size;
    /* Every mapping touching the range must lie wholly inside it. */
    int found = 0;
    for (size_t i = 0; i < r->nmaps; i++) {
        struct mapping *m = &r->maps[i];
        if (m->va < end && ptr < m->va + m->size) {
            if (m->va < ptr || m->va + m->size > end)
                goto out;
            found = 1;
        }
    }
    if (!found)
        goto out;
    for (size_t i = r->nmaps; i-- > 0;)
        if (r->maps[i].va >= ptr && r->maps[i].va < end)
            unmap_at(r, i);
    rc = CUDA_SUCCESS;
out:
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                size_t count)
{
    NEED_INIT();
    if (!desc || !count || !size)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        CUresult err = CUDA_SUCCESS;
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE &&
            desc[i].location.type != CU_MEM_LOCATION_TYPE_HOST &&
            desc[i].location.type != CU_MEM_LOCATION_TYPE_HOST_NUMA)
            return CUDA_ERROR_INVALID_VALUE;
        if (location_phys(&desc[i].location, &err) == -2)
            return err;
        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    }
    LOCK();
    struct region *r = live_containing(ptr);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (r && r->kind == R_RESERVE && ptr + size <= r->base + r->size) {
        /* The whole range must be mapped. */
        unsigned long long covered = 0;
        for (size_t i = 0; i < r->nmaps; i++) {
            struct mapping *m = &r->maps[i];
            unsigned long long lo = m->va > ptr ? m->va : ptr;
            unsigned long long hi = m->va + m->size < ptr + size ? m->va + m->size : ptr + size;
            if (hi > lo)
                covered += hi - lo;
        }
        if (covered == size)
            rc = CUDA_SUCCESS;
    }
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    NEED_INIT();
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct region *r = live_containing((unsigned long long)(uintptr_t)addr);
    struct mapping *m = r && r->kind == R_RESERVE ? mapping_containing(r, (uintptr_t)addr) : NULL;
    if (m) {
        m->h->refs++;
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->h;
    }
    UNLOCK();
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------------ */
/* Streams and events                                                        */

/* G.mu held. */
static CUresult stream_ctx(CUstream s, struct sim_ctx **out)
{
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return cur_ctx(out);
    struct sim_stream *st = obj_get(s, O_STREAM);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!atomic_load(&st->hdr.ctx->alive))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = st->hdr.ctx;
    return CUDA_SUCCESS;
}

static CUresult stream_check(CUstream s)
{
    NEED_INIT();
    struct sim_ctx *c;
    LOCK();
    CUresult rc = stream_ctx(s, &c);
    UNLOCK();
    return rc;
}

static CUresult stream_create(CUstream *ph, unsigned int flags, int priority)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_stream *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->hdr.type = O_STREAM;
    s->hdr.ctx = c;
    s->flags = flags;
    s->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority;
    LOCK();
    int err = obj_add(s);
    UNLOCK();
    if (err) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ph = (CUstream)s;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return stream_create(phStream, Flags, 0);
}

SIM_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    return stream_create(phStream, flags, priority);
}

SIM_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
    NEED_INIT();
    LOCK();
    struct sim_stream *s = obj_get(hStream, O_STREAM);
    if (s)
        hm_del(&G.objs, (uintptr_t)s);
    UNLOCK();
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    free(s);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamDestroy(CUstream hStream)
{
    return cuStreamDestroy_v2(hStream);
}

SIM_API CUresult cuStreamSynchronize(CUstream hStream) { return stream_check(hStream); }
SIM_API CUresult cuStreamSynchronize_ptsz(CUstream hStream) { return stream_check(hStream); }
SIM_API CUresult cuStreamQuery(CUstream hStream) { return stream_check(hStream); }
SIM_API CUresult cuStreamQuery_ptsz(CUstream hStream) { return stream_check(hStream); }

static CUresult event_check(CUevent e)
{
    NEED_INIT();
    LOCK();
    struct sim_event *ev = obj_get(e, O_EVENT);
    UNLOCK();
    return ev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult stream_wait(CUstream s, CUevent e, unsigned int flags)
{
    CUresult rc = stream_check(s);
    if (rc)
        return rc;
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    return event_check(e);
}

SIM_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{ return stream_wait(hStream, hEvent, Flags); }
SIM_API CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{ return stream_wait(hStream, hEvent, Flags); }

SIM_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!phEvent || (Flags & ~0xfu))
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_event *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->hdr.type = O_EVENT;
    e->hdr.ctx = c;
    e->flags = Flags;
    LOCK();
    int err = obj_add(e);
    UNLOCK();
    if (err) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phEvent = (CUevent)e;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuEventDestroy_v2(CUevent hEvent)
{
    NEED_INIT();
    LOCK();
    struct sim_event *e = obj_get(hEvent, O_EVENT);
    if (e)
        hm_del(&G.objs, (uintptr_t)e);
    UNLOCK();
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    free(e);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuEventDestroy(CUevent hEvent)
{
    return cuEventDestroy_v2(hEvent);
}

static CUresult event_record(CUevent e, CUstream s)
{
    CUresult rc = event_check(e);
    return rc ? rc : stream_check(s);
}

SIM_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream); }
SIM_API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream); }
SIM_API CUresult cuEventSynchronize(CUevent hEvent) { return event_check(hEvent); }
SIM_API CUresult cuEventQuery(CUevent hEvent) { return event_check(hEvent); }

/* ------------------------------------------------------------------------ */
/* Stream-ordered allocation and memory pools                                */

/* G.mu held. */
static struct sim_pool *default_pool(int phys)
{
    if (!G.default_pool[phys]) {
        struct sim_pool *p = calloc(1, sizeof *p);
        if (!p || obj_add(p)) {
            free(p);
            return NULL;
        }
        p->hdr.type = O_POOL;
        p->phys = phys;
        p->is_default = 1;
        G.default_pool[phys] = p;
    }
    if (!G.current_pool[phys])
        G.current_pool[phys] = G.default_pool[phys];
    return G.default_pool[phys];
}

SIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    NEED_INIT();
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    struct sim_pool *p = default_pool(phys);
    UNLOCK();
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool_out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    NEED_INIT();
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    struct sim_pool *p = default_pool(phys) ? G.current_pool[phys] : NULL;
    UNLOCK();
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    NEED_INIT();
    int phys = dev_phys(dev);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    struct sim_pool *p = obj_get(pool, O_POOL);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (p && p->phys == phys && default_pool(phys)) {
        G.current_pool[phys] = p;
        rc = CUDA_SUCCESS;
    }
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    NEED_INIT();
    if (!pool || !poolProps)
        return CUDA_ERROR_INVALID_VALUE;
    if (poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED &&
        poolProps->allocType != CU_MEM_ALLOCATION_TYPE_MANAGED)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult err = CUDA_SUCCESS;
    int phys = location_phys(&poolProps->location, &err);
    if (phys == -2)
        return err;
    struct sim_pool *p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->hdr.type = O_POOL;
    p->phys = phys;
    LOCK();
    int e = obj_add(p);
    UNLOCK();
    if (e) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    NEED_INIT();
    LOCK();
    struct sim_pool *p = obj_get(pool, O_POOL);
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (p && !p->is_default) {
        /* Outstanding allocations stay valid until freed, so the structure
         * is kept; only the handle dies. */
        hm_del(&G.objs, (uintptr_t)p);
        p->destroyed = 1;
        if (p->phys >= 0 && G.current_pool[p->phys] == p)
            G.current_pool[p->phys] = G.default_pool[p->phys];
        rc = CUDA_SUCCESS;
    }
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    NEED_INIT();
    LOCK();
    struct sim_pool *p = obj_get(pool, O_POOL);
    UNLOCK();
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    NEED_INIT();
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_pool *p = obj_get(pool, O_POOL);
    CUresult rc = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (p) {
        switch (attr) {
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
            p->reuse[attr] = *(int *)value;
            break;
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
            p->threshold = *(cuuint64_t *)value;
            break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
            if (*(cuuint64_t *)value != 0)
                rc = CUDA_ERROR_INVALID_VALUE;
            else
                p->peak = p->used;
            break;
        default:
            rc = CUDA_ERROR_INVALID_VALUE;
        }
    }
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    NEED_INIT();
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_pool *p = obj_get(pool, O_POOL);
    CUresult rc = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (p) {
        switch (attr) {
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
            *(int *)value = p->reuse[attr];
            break;
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = p->threshold; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = p->used; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = p->peak; break;
        default: rc = CUDA_ERROR_INVALID_VALUE;
        }
    }
    UNLOCK();
    return rc;
}

/* Stream-ordered allocations take effect at once.  pool == NULL: the
 * current pool of the stream's device. */
static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, int from_pool,
                            CUstream hStream)
{
    NEED_INIT();
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_ctx *c = NULL;
    CUresult rc = stream_ctx(hStream, &c);
    if (rc)
        goto out;
    struct sim_pool *p;
    if (from_pool) {
        p = obj_get(pool, O_POOL);
        if (!p) {
            rc = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
    } else {
        p = default_pool(c->phys) ? G.current_pool[c->phys] : NULL;
        if (!p) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
    }
    rc = mem_alloc_locked(c, p->phys, bytesize, 0, 0, p, dptr);
out:
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{ return alloc_async(dptr, bytesize, NULL, 0, hStream); }
SIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{ return alloc_async(dptr, bytesize, NULL, 0, hStream); }
SIM_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream hStream)
{ return alloc_async(dptr, bytesize, pool, 1, hStream); }
SIM_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream)
{ return alloc_async(dptr, bytesize, pool, 1, hStream); }

static CUresult free_async(CUdeviceptr dptr, CUstream hStream)
{
    NEED_INIT();
    LOCK();
    struct sim_ctx *c;
    CUresult rc = stream_ctx(hStream, &c);
    if (!rc) {
        struct region *r = live_exact(dptr);
        if (!r || r->kind != R_ALLOC)
            rc = CUDA_ERROR_INVALID_VALUE;
        else
            region_free(r);
    }
    UNLOCK();
    return rc;
}

SIM_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) { return free_async(dptr, hStream); }
SIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) { return free_async(dptr, hStream); }

/* ------------------------------------------------------------------------ */
/* Arrays                                                                    */

/* Bytes of one w x h x d level; 0 for an invalid format/channel count. */
static unsigned long long level_bytes(CUarray_format f, unsigned ch, unsigned long long w,
                                      unsigned long long h, unsigned long long d)
{
    unsigned long long elem = 0, block = 0;
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: elem = 1; break;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: elem = 2; break;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: elem = 4; break;
    case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X1: ch = 1; elem = 1; break;
    case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X2: ch = 1; elem = 2; break;
    case CU_AD_FORMAT_UNORM_INT8X4: case CU_AD_FORMAT_SNORM_INT8X4: ch = 1; elem = 4; break;
    case CU_AD_FORMAT_UNORM_INT16X1: case CU_AD_FORMAT_SNORM_INT16X1: ch = 1; elem = 2; break;
    case CU_AD_FORMAT_UNORM_INT16X2: case CU_AD_FORMAT_SNORM_INT16X2: ch = 1; elem = 4; break;
    case CU_AD_FORMAT_UNORM_INT16X4: case CU_AD_FORMAT_SNORM_INT16X4: ch = 1; elem = 8; break;
    case CU_AD_FORMAT_UNORM_INT_101010_2: ch = 1; elem = 4; break;
    case CU_AD_FORMAT_BC1_UNORM: case CU_AD_FORMAT_BC1_UNORM_SRGB:
    case CU_AD_FORMAT_BC4_UNORM: case CU_AD_FORMAT_BC4_SNORM: block = 8; break;
    case CU_AD_FORMAT_BC2_UNORM: case CU_AD_FORMAT_BC2_UNORM_SRGB:
    case CU_AD_FORMAT_BC3_UNORM: case CU_AD_FORMAT_BC3_UNORM_SRGB:
    case CU_AD_FORMAT_BC5_UNORM: case CU_AD_FORMAT_BC5_SNORM:
    case CU_AD_FORMAT_BC6H_UF16: case CU_AD_FORMAT_BC6H_SF16:
    case CU_AD_FORMAT_BC7_UNORM: case CU_AD_FORMAT_BC7_UNORM_SRGB: block = 16; break;
    case CU_AD_FORMAT_NV12: case CU_AD_FORMAT_NV16: case CU_AD_FORMAT_YUY2:
    case CU_AD_FORMAT_Y444_PLANAR8: case CU_AD_FORMAT_YUV444_8bit_SemiPlanar:
    case CU_AD_FORMAT_AYUV: ch = 1; elem = 4; break;
    case CU_AD_FORMAT_P010: case CU_AD_FORMAT_P016: case CU_AD_FORMAT_P210:
    case CU_AD_FORMAT_P216: case CU_AD_FORMAT_Y210: case CU_AD_FORMAT_Y216:
    case CU_AD_FORMAT_Y410: case CU_AD_FORMAT_Y416: case CU_AD_FORMAT_Y444_PLANAR10:
    case CU_AD_FORMAT_YUV444_16bit_SemiPlanar: ch = 1; elem = 8; break;
    default: return 0;
    }
    if (block) {
        return ((w + 3) / 4) * ((h + 3) / 4) * d * block;
    }
    if (ch != 1 && ch != 2 && ch != 4)
        return 0;
    if (w > (1ULL << 20) || h > (1ULL << 20) || d > (1ULL << 20))
        return 0;
    return w * h * d * ch * elem;
}

static unsigned long long array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *a, unsigned levels)
{
    unsigned long long total = 0;
    int layered = (a->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
    for (unsigned l = 0; l < (levels ? levels : 1); l++) {
        unsigned long long w = a->Width >> l, h = a->Height >> l;
        unsigned long long d = layered ? a->Depth : a->Depth >> l;
        if (!w) w = 1;
        if (!h) h = 1;
        if (!d) d = 1;
        unsigned long long b = level_bytes(a->Format, a->NumChannels, w, h, d);
        if (!b)
            return 0;
        total += b;
        if (!(a->Width >> l) && !(a->Height >> l) && !(a->Depth >> l))
            break;
    }
    return total;
}

static CUresult array_create(void **out, const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned levels,
                             int type)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!out || !desc || !desc->Width)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long bytes = array_bytes(desc, levels);
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_array *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->hdr.type = type;
    a->hdr.ctx = c;
    a->phys = c->phys;
    a->desc = *desc;
    a->levels = levels;
    a->charge = round_up(bytes, G.cfg.granularity);
    LOCK();
    rc = charge(a->phys, a->charge);
    if (!rc && obj_add(a)) {
        uncharge(a->phys, a->charge);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    UNLOCK();
    if (rc) {
        free(a);
        return rc;
    }
    *out = a;
    return CUDA_SUCCESS;
}

static CUresult array_destroy(void *h, int type)
{
    NEED_INIT();
    LOCK();
    struct sim_array *a = obj_get(h, type);
    if (a) {
        hm_del(&G.objs, (uintptr_t)a);
        uncharge(a->phys, a->charge);
    }
    UNLOCK();
    if (!a)
        return CUDA_ERROR_INVALID_HANDLE;
    free(a);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
    CUDA_ARRAY3D_DESCRIPTOR d = {0};
    if (pAllocateArray) {
        d.Width = pAllocateArray->Width;
        d.Height = pAllocateArray->Height;
        d.Format = pAllocateArray->Format;
        d.NumChannels = pAllocateArray->NumChannels;
    }
    return array_create((void **)pHandle, pAllocateArray ? &d : NULL, 0, O_ARRAY);
}

SIM_API CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *pAllocateArray)
{
    CUDA_ARRAY3D_DESCRIPTOR d = {0};
    if (pAllocateArray) {
        d.Width = pAllocateArray->Width;
        d.Height = pAllocateArray->Height;
        d.Format = pAllocateArray->Format;
        d.NumChannels = pAllocateArray->NumChannels;
    }
    return array_create((void **)pHandle, pAllocateArray ? &d : NULL, 0, O_ARRAY);
}

SIM_API CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
    return array_create((void **)pHandle, pAllocateArray, 0, O_ARRAY);
}

SIM_API CUresult cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *pAllocateArray)
{
    CUDA_ARRAY3D_DESCRIPTOR d = {0};
    if (pAllocateArray) {
        d.Width = pAllocateArray->Width;
        d.Height = pAllocateArray->Height;
        d.Depth = pAllocateArray->Depth;
        d.Format = pAllocateArray->Format;
        d.NumChannels = pAllocateArray->NumChannels;
        d.Flags = pAllocateArray->Flags;
    }
    return array_create((void **)pHandle, pAllocateArray ? &d : NULL, 0, O_ARRAY);
}

SIM_API CUresult cuArrayDestroy(CUarray hArray)
{
    return array_destroy(hArray, O_ARRAY);
}

static CUresult array_desc(CUarray h, CUDA_ARRAY3D_DESCRIPTOR *out)
{
    NEED_INIT();
    LOCK();
    struct sim_array *a = obj_get(h, O_ARRAY);
    if (a)
        *out = a->desc;
    UNLOCK();
    return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIM_API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *pArrayDescriptor, CUarray hArray)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUresult rc = array_desc(hArray, &d);
    if (rc)
        return rc;
    if (!pArrayDescriptor)
        return CUDA_ERROR_INVALID_VALUE;
    pArrayDescriptor->Width = d.Width;
    pArrayDescriptor->Height = d.Height;
    pArrayDescriptor->Format = d.Format;
    pArrayDescriptor->NumChannels = d.NumChannels;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuArrayGetDescriptor(CUDA_ARRAY_DESCRIPTOR_v1 *pArrayDescriptor, CUarray hArray)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUresult rc = array_desc(hArray, &d);
    if (rc)
        return rc;
    if (!pArrayDescriptor)
        return CUDA_ERROR_INVALID_VALUE;
    pArrayDescriptor->Width = (unsigned int)d.Width;
    pArrayDescriptor->Height = (unsigned int)d.Height;
    pArrayDescriptor->Format = d.Format;
    pArrayDescriptor->NumChannels = d.NumChannels;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor, CUarray hArray)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUresult rc = array_desc(hArray, &d);
    if (rc)
        return rc;
    if (!pArrayDescriptor)
        return CUDA_ERROR_INVALID_VALUE;
    *pArrayDescriptor = d;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR_v1 *pArrayDescriptor, CUarray hArray)
{
    CUDA_ARRAY3D_DESCRIPTOR d;
    CUresult rc = array_desc(hArray, &d);
    if (rc)
        return rc;
    if (!pArrayDescriptor)
        return CUDA_ERROR_INVALID_VALUE;
    pArrayDescriptor->Width = (unsigned int)d.Width;
    pArrayDescriptor->Height = (unsigned int)d.Height;
    pArrayDescriptor->Depth = (unsigned int)d.Depth;
    pArrayDescriptor->Format = d.Format;
    pArrayDescriptor->NumChannels = d.NumChannels;
    pArrayDescriptor->Flags = d.Flags;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                        const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                        unsigned int numMipmapLevels)
{
    if (!numMipmapLevels)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return array_create((void **)pHandle, pMipmappedArrayDesc, numMipmapLevels, O_MIPMAP);
}

SIM_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    return array_destroy(hMipmappedArray, O_MIPMAP);
}

/* ------------------------------------------------------------------------ */
/* Launch                                                                    */

SIM_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                                void **extra)
{
    return stream_check(hStream);
}

SIM_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX,
                                     unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream,
                                     void **kernelParams, void **extra)
{
    return stream_check(hStream);
}

/* ------------------------------------------------------------------------ */
/* cuGetProcAddress                                                          */

static const struct proc {
    const char *name;
    void *fn;
    int version;
    int per_thread;
} procs[] = {
#define SIM_PROC(n, f, v, p) {n, (void *)f, v, p},
#include "sim_procs.inc"
#undef SIM_PROC
};

/* CGPU_SIM_TRACE=1: log cuGetProcAddress and cuGetExportTable to stderr. */
static int trace_on(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("CGPU_SIM_TRACE");
        on = e && *e && strcmp(e, "0") != 0;
    }
    return on;
}

static CUresult get_proc_traced(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *status);

static CUresult get_proc(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status)
{
    CUresult rc = get_proc_traced(symbol, pfn, cudaVersion, flags, status);
    if (trace_on()) {
        Dl_info info;
        const char *name = rc == CUDA_SUCCESS && dladdr(*pfn, &info) && info.dli_sname
                               ? info.dli_sname : "-";
        fprintf(stderr, "cgpu-sim: cuGetProcAddress(\"%s\", %d, %llu) = %d %s\n",
                symbol ? symbol : "(null)", cudaVersion, (unsigned long long)flags, (int)rc, name);
    }
    return rc;
}

static CUresult get_proc_traced(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                              CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    const struct proc *plain = NULL, *pt = NULL;
    int found = 0;
    for (size_t i = 0; i < sizeof procs / sizeof *procs; i++) {
        const struct proc *p = &procs[i];
        if (strcmp(p->name, symbol))
            continue;
        found = 1;
        if (p->version > cudaVersion)
            continue;
        if (p->per_thread) {
            if (!pt || p->version > pt->version)
                pt = p;
        } else if (!plain || p->version > plain->version) {
            plain = p;
        }
    }
    const struct proc *chosen =
        (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && pt ? pt : plain;
    if (!chosen) {
        if (status)
            *status = found ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                            : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = chosen->fn;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    return get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}

SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return get_proc(symbol, pfn, cudaVersion, flags, NULL);
}
