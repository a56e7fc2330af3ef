/* The simulated CUDA driver (libcuda.so.1).  Transfers: every copy and set
 * moves real bytes (cuda_backing.c), in stream order.
 *
 * Every copy and set is one transfer: up to three dimensions between two
 * sides (host, device or array), or a fill of device memory.  An operation on
 * a stream whose queued work has ended runs at once; otherwise it waits in a
 * list, ordered by its stream's work (a mark on its device), and runs when
 * something observes that work done: a synchronisation (wait_mark), a stream
 * or event query that finds the work done, or the next copy or set.  Kernels
 * compute nothing, so running the list in that order gives every well-ordered program the
 * bytes a GPU would, and a program that reads before it synchronises sees old
 * bytes, as on a GPU.
 *
 * Host sides follow the driver's "API synchronization behavior": an
 * asynchronous copy from pageable memory stages the bytes before it returns;
 * one to pageable memory returns when it is done; pinned memory is read and
 * written when the copy runs. */
#include "cuda_transfer.h"

#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

struct pending {
    struct xfer x;
    unsigned long long due, seq;   /* due: the mark of the work it waits for */
    int phys;                      /* on this device */
};

static struct pending *pend;
static size_t npend, cappend;
static unsigned long long pend_seq;
static unsigned pend_gen;          /* drv.gen the list belongs to */
static _Atomic size_t pend_count;

/* ---- Resolving sides (drv.mu held) ---- */

#define R_ACCESS ((unsigned)CU_MEM_ACCESS_FLAGS_PROT_READ)
#define W_ACCESS ((unsigned)CU_MEM_ACCESS_FLAGS_PROT_READWRITE)

/* [lo, hi) lies in one live allocation, or in mapped ranges of one
 * reservation that a device may access (`need`: CU_MEM_ACCESS_FLAGS_PROT_READ
 * to read, _PROT_READWRITE to write; cuMemSetAccess grants it). */
static int dev_span_ok(unsigned long long lo, unsigned long long hi, unsigned need)
{
    if (hi < lo)
        return 0;
    struct region *r = live_containing(lo);
    if (!r || hi > r->base + r->size)
        return 0;
    if (r->kind == R_ALLOC)
        return 1;
    for (unsigned long long p = lo; p < hi;) {
        struct mapping *m = mapping_containing(r, p);
        if (!m || (m->access & need) != need)
            return 0;
        p = m->va + m->size;
    }
    return 1;
}

static int host_pinned_locked(unsigned long long p)
{
    struct hrange *h = host_range(p);
    return h != NULL;
}

/* Check one side of a transfer and settle its type: S_ANY becomes S_HOST or
 * S_DEV, a host pointer inside the device address space becomes S_DEV. */
static CUresult side_check(struct side *s, const struct xfer *x, unsigned need)
{
    unsigned long long span = (x->d - 1) * s->pitch * s->height + (x->h - 1) * s->pitch + x->w;
    if (x->d > 1 && s->type != S_ARRAY && s->height < x->h)
        return CUDA_ERROR_INVALID_VALUE;
    if (x->h > 1 && s->type != S_ARRAY && s->pitch < x->w)
        return CUDA_ERROR_INVALID_VALUE;
    if ((s->type == S_ANY || s->type == S_HOST) && backing_is_device(s->addr))
        s->type = S_DEV;
    /* Pinned host memory is also a device address (unified addressing). */
    if ((s->type == S_DEV || (s->type == S_ANY && x->set)) && !backing_is_device(s->addr)) {
        struct hrange *h = host_range(s->addr);
        if (!h || s->addr + span < s->addr || s->addr + span > h->base + h->size)
            return CUDA_ERROR_INVALID_VALUE;
        s->type = S_HOST;
    }
    switch (s->type) {
    case S_ANY:
    case S_HOST:
        s->type = S_HOST;
        return s->addr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case S_DEV:
        if (!dev_span_ok(s->addr, s->addr + span, need))
            return CUDA_ERROR_INVALID_VALUE;
        struct region *r = live_containing(s->addr);
        s->rid = r->id;
        r->touched = 1; /* its pages may now hold memory: give them back at free */
        return CUDA_SUCCESS;
    case S_ARRAY: {
        if (!s->arr || (!obj_get(s->arr, O_ARRAY)))
            return CUDA_ERROR_INVALID_VALUE;
        if (!s->pitch) { /* 1-D copy: the array as linear bytes */
            s->pitch = x->w;
            s->height = 1;
            return s->addr + x->w >= s->addr && s->addr + x->w <= s->arr->bytes
                       ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
        }
        unsigned long long rows, slices, row = array_row(s->arr, &rows, &slices);
        /* addr holds x (bytes) + y * row + z * row * rows, split back here. */
        unsigned long long z = s->addr / (row * rows), y = s->addr % (row * rows) / row,
                           xb = s->addr % row;
        if (!row || xb + x->w > row || y + x->h > rows || z + x->d > slices)
            return CUDA_ERROR_INVALID_VALUE;
        s->pitch = row;
        s->height = rows;
        return CUDA_SUCCESS;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* The host address of a side's row (y, z), or NULL if it is gone. */
static unsigned char *side_row(const struct side *s, unsigned long long y, unsigned long long z)
{
    unsigned long long off = z * s->pitch * s->height + y * s->pitch;
    switch (s->type) {
    case S_HOST: return (unsigned char *)(uintptr_t)(s->addr + off);
    case S_DEV: return backing_ptr(s->addr + off);
    case S_ARRAY: return s->arr->bk ? s->arr->bk + s->addr + off : NULL;
    default: return NULL;
    }
}

/* A device side still names the memory it was checked against. */
static int dev_side_live(const struct side *s, const struct xfer *x, unsigned need)
{
    unsigned long long span = (x->d - 1) * s->pitch * s->height + (x->h - 1) * s->pitch + x->w;
    struct region *r = live_containing(s->addr);
    return r && r->id == s->rid && dev_span_ok(s->addr, s->addr + span, need);
}

/* Copy n bytes where either side may be a bad host pointer: through the
 * kernel (process_vm_readv on this process), so that a bad pointer is an
 * error, not a crash.  0, or -1 on a fault. */
static int host_copy(void *dst, const void *src, size_t n)
{
    static _Atomic int unavailable;
    if (!atomic_load_explicit(&unavailable, memory_order_relaxed)) {
        while (n) {
            struct iovec l = {dst, n}, r = {(void *)(uintptr_t)src, n};
            ssize_t got = process_vm_readv(getpid(), &l, 1, &r, 1, 0);
            if (got > 0) {
                dst = (char *)dst + got;
                src = (const char *)src + got;
                n -= (size_t)got;
                continue;
            }
            if (got < 0 && (errno == ENOSYS || errno == EPERM)) {
                atomic_store(&unavailable, 1); /* seccomp or an old kernel: plain copies */
                break;
            }
            return -1;
        }
        if (!n)
            return 0;
    }
    memmove(dst, src, n);
    return 0;
}

/* Run a transfer (drv.mu held); 0, or -1 when a host side faults.  Device
 * sides are checked again: memory freed while the copy waited (even if its
 * address was given out again) is skipped, as a fault would lose it. */
static int run_locked(struct xfer *x)
{
    if (x->dst.type == S_DEV && !dev_side_live(&x->dst, x, W_ACCESS))
        return 0;
    if (!x->set && !x->stage && x->src.type == S_DEV && !dev_side_live(&x->src, x, R_ACCESS))
        return 0;
    if ((x->dst.type == S_ARRAY && !obj_get(x->dst.arr, O_ARRAY)) ||
        (!x->set && !x->stage && x->src.type == S_ARRAY && !obj_get(x->src.arr, O_ARRAY)))
        return 0;
    int host = x->dst.type == S_HOST || (!x->stage && x->src.type == S_HOST);
    const unsigned char *st = x->stage;
    for (unsigned long long z = 0; z < x->d; z++)
        for (unsigned long long y = 0; y < x->h; y++) {
            unsigned char *d = side_row(&x->dst, y, z);
            if (!d)
                return 0;
            if (x->set) {
                if (x->esize == 1) {
                    memset(d, (int)(x->val & 0xff), x->w);
                } else {
                    for (unsigned long long i = 0; i + x->esize <= x->w; i += x->esize)
                        memcpy(d + i, &x->val, x->esize); /* little-endian, as the GPU */
                }
                continue;
            }
            const unsigned char *s = st ? st : side_row(&x->src, y, z);
            if (!s)
                return 0;
            if (!host)
                memmove(d, s, x->w);
            else if (host_copy(d, s, x->w))
                return -1;
            if (st)
                st += x->w;
        }
    return 0;
}

static void pend_reset_if_forked(void)
{
    if (pend_gen != drv.gen) {
        pend = NULL; /* the parent's list: not ours to run or free */
        npend = cappend = 0;
        pend_gen = drv.gen;
        atomic_store(&pend_count, 0);
    }
}

/* Run every waiting operation whose work is done, in order (drv.mu held). */
static void settle_locked(void)
{
    pend_reset_if_forked();
    unsigned long long done[SIM_MAX_DEVICES];
    unsigned looked = 0;
    size_t keep = 0;
    for (size_t i = 0; i < npend; i++) {
        int p = pend[i].phys;
        if (!(looked & 1u << p)) {
            done[p] = work_done(p);
            looked |= 1u << p;
        }
        if (pend[i].due <= done[p]) {
            run_locked(&pend[i].x); /* a fault here would be a sticky error on a GPU */
            free(pend[i].x.stage);
        } else {
            pend[keep++] = pend[i];
        }
    }
    if (keep != npend) {
        npend = keep;
        atomic_store(&pend_count, npend);
    }
}

void mem_settle(void)
{
    if (!atomic_load(&pend_count) || !INITED())
        return;
    LOCK();
    settle_locked();
    UNLOCK();
}

/* Every wait (cuda_current.c) runs the copies and sets due by its time. */
__attribute__((constructor)) static void settle_on_wait(void)
{
    wait_on_settle(mem_settle);
}

/* Queue `x` to run when work `due` on `phys` is done (drv.mu held); 0 or -1. */
static int pend_add(const struct xfer *x, int phys, unsigned long long due)
{
    pend_reset_if_forked();
    if (npend == cappend) {
        size_t ncap = cappend ? cappend * 2 : 64;
        struct pending *np = realloc(pend, ncap * sizeof *np);
        if (!np)
            return -1;
        pend = np;
        cappend = ncap;
    }
    size_t i = npend;
    while (i > 0 && pend[i - 1].phys == phys && pend[i - 1].due > due)
        i--;
    memmove(pend + i + 1, pend + i, (npend - i) * sizeof *pend);
    pend[i] = (struct pending){*x, due, ++pend_seq, phys};
    npend++;
    atomic_store(&pend_count, npend);
    return 0;
}

/* ---- Issuing ---- */


/* Check, then run or queue a transfer (the modes: cuda_transfer.h). */
CUresult xfer_issue(struct xfer *x, CUstream stream, int mode)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    LOCK();
    struct sim_queue *q = NULL;
    if (mode == T_ASYNC)
        rc = stream_queue(stream, &c, &q);
    else
        q = &c->q_legacy;
    if (!rc && x->w && x->h && x->d) {
        rc = side_check(&x->dst, x, W_ACCESS);
        if (!rc && !x->set)
            rc = side_check(&x->src, x, R_ACCESS);
    }
    if (rc || !x->w || !x->h || !x->d) {
        UNLOCK();
        return rc;
    }
    unsigned long long due = q == &c->q_legacy ? c->last_end : q->last_end;
    int phys = c->phys;
    settle_locked();
    int to_pageable = x->dst.type == S_HOST && !host_pinned_locked(x->dst.addr);
    int from_pageable = !x->set && x->src.type == S_HOST && !host_pinned_locked(x->src.addr);
    if (due <= work_done(phys)) {
        rc = run_locked(x) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
        UNLOCK();
        return rc;
    }
    if (mode == T_SYNC || to_pageable) {
        /* Wait for the stream, then copy. */
        UNLOCK();
        wait_mark(phys, due);
        LOCK();
        settle_locked();
        rc = run_locked(x) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
        UNLOCK();
        return rc;
    }
    if (from_pageable) {
        unsigned char *st = malloc(x->w * x->h * x->d);
        if (!st) {
            UNLOCK();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        unsigned char *o = st;
        for (unsigned long long z = 0; z < x->d; z++)
            for (unsigned long long y = 0; y < x->h; y++, o += x->w)
                if (host_copy(o, side_row(&x->src, y, z), x->w)) {
                    free(st);
                    UNLOCK();
                    return CUDA_ERROR_INVALID_VALUE;
                }
        x->stage = st;
    }
    if (pend_add(x, phys, due)) {
        free(x->stage);
        UNLOCK();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    UNLOCK();
    return CUDA_SUCCESS;
}
