/* The simulated CUDA driver (libcuda.so.1).  Copies and sets: they move real
 * bytes (cuda_backing.c), in stream order.
 *
 * Every copy and set is one transfer: up to three dimensions between two
 * sides (host, device or array), or a fill of device memory.  An operation on
 * a stream whose queued work has ended runs at once; otherwise it waits in a
 * list, ordered by the time its stream's work ends, and runs when something
 * observes that time: a synchronisation (wait_until), a stream or event query
 * that finds the work done, or the next copy or set.  Kernels compute nothing,
 * so running the list in time order gives every well-ordered program the
 * bytes a GPU would, and a program that reads before it synchronises sees old
 * bytes, as on a GPU.
 *
 * Host sides follow the driver's "API synchronization behavior": an
 * asynchronous copy from pageable memory stages the bytes before it returns;
 * one to pageable memory returns when it is done; pinned memory is read and
 * written when the copy runs. */
#include "cuda_sim.h"

#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

enum { S_HOST = 1, S_DEV, S_ARRAY, S_ANY };

struct side {
    int type;
    unsigned long long addr;       /* host pointer, device address, or byte offset in the array */
    struct sim_array *arr;
    unsigned long long pitch, height; /* bytes per row; rows per slice */
    unsigned long long rid;        /* S_DEV: the region's id when checked */
};

struct xfer {
    struct side dst, src;
    unsigned long long w, h, d;    /* bytes per row, rows, slices */
    int set;                       /* a fill: esize-byte elements of val */
    unsigned esize, val;
    unsigned char *stage;          /* pageable source, staged */
};

struct pending {
    struct xfer x;
    unsigned long long due, seq;
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

/* Bytes of an array's level 0 and its rows per slice (0: not an array). */
static unsigned long long array_row(const struct sim_array *a, unsigned long long *rows,
                                    unsigned long long *slices)
{
    *rows = a->desc.Height ? a->desc.Height : 1;
    *slices = a->desc.Depth ? a->desc.Depth : 1;
    return a->row_bytes;
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

/* Run every waiting operation due by `t` (drv.mu held). */
static void settle_locked(unsigned long long t)
{
    pend_reset_if_forked();
    size_t i = 0;
    while (i < npend && pend[i].due <= t) {
        run_locked(&pend[i].x); /* a fault here would be a sticky error on a GPU */
        free(pend[i].x.stage);
        i++;
    }
    if (i) {
        memmove(pend, pend + i, (npend - i) * sizeof *pend);
        npend -= i;
        atomic_store(&pend_count, npend);
    }
}

void mem_settle(unsigned long long t)
{
    if (!atomic_load(&pend_count) || !INITED())
        return;
    LOCK();
    settle_locked(t);
    UNLOCK();
}

/* Every wait (cuda_current.c) runs the copies and sets due by its time. */
__attribute__((constructor)) static void settle_on_wait(void)
{
    wait_on_settle(mem_settle);
}

/* Queue `x` to run at `due` (drv.mu held); 0 or -1. */
static int pend_add(const struct xfer *x, unsigned long long due)
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
    while (i > 0 && pend[i - 1].due > due)
        i--;
    memmove(pend + i + 1, pend + i, (npend - i) * sizeof *pend);
    pend[i] = (struct pending){*x, due, ++pend_seq};
    npend++;
    atomic_store(&pend_count, npend);
    return 0;
}

/* ---- Issuing ---- */

enum { T_SYNC, T_ASYNC, T_SET_SYNC };

/* Check, then run or queue a transfer.  T_SYNC: a synchronous copy, which
 * waits for the context's queued work and is done when it returns.
 * T_ASYNC: on `stream`.  T_SET_SYNC: a synchronous set, on the legacy
 * stream (asynchronous for device memory, as the driver documents). */
static CUresult issue(struct xfer *x, CUstream stream, int mode)
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
    unsigned long long now = sim_now_ns();
    unsigned long long due = q == &c->q_legacy ? c->last_end : q->last_end;
    settle_locked(now);
    int to_pageable = x->dst.type == S_HOST && !host_pinned_locked(x->dst.addr);
    int from_pageable = !x->set && x->src.type == S_HOST && !host_pinned_locked(x->src.addr);
    if (due <= now) {
        rc = run_locked(x) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
        UNLOCK();
        return rc;
    }
    if (mode == T_SYNC || to_pageable) {
        /* Wait for the stream, then copy. */
        UNLOCK();
        wait_until(due);
        LOCK();
        settle_locked(due);
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
    if (pend_add(x, due)) {
        free(x->stage);
        UNLOCK();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    UNLOCK();
    return CUDA_SUCCESS;
}

#define HP(p) ((unsigned long long)(uintptr_t)(p))

static CUresult copy1d(unsigned long long dst, int dt, struct sim_array *da, unsigned long long src,
                       int st, struct sim_array *sa, unsigned long long n, CUstream s, int mode)
{
    if (!INITED())
        return CUDA_ERROR_NOT_INITIALIZED;
    /* Array sides get pitch 0: the array as linear bytes from the offset. */
    struct xfer x = {.dst = {dt, dst, da, dt == S_ARRAY ? 0 : n, 1},
                     .src = {st, src, sa, st == S_ARRAY ? 0 : n, 1}, .w = n, .h = 1, .d = 1};
    return issue(&x, s, mode);
}

/* ---- 1-D copies ---- */

SIM_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{ return copy1d(dst, S_ANY, NULL, src, S_ANY, NULL, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{ return copy1d(dst, S_ANY, NULL, src, S_ANY, NULL, ByteCount, CU_STREAM_PER_THREAD, T_SYNC); }
SIM_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{ return copy1d(dst, S_ANY, NULL, src, S_ANY, NULL, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{ return copy1d(dst, S_ANY, NULL, src, S_ANY, NULL, ByteCount, hStream, T_ASYNC); }

/* Peer copies: the contexts must be live; the addresses say the rest. */
static CUresult peer_check(CUcontext a, CUcontext b)
{
    if (!INITED())
        return CUDA_ERROR_NOT_INITIALIZED;
    LOCK();
    struct sim_ctx *x = obj_get(a, O_CTX), *y = obj_get(b, O_CTX);
    int ok = x && y && atomic_load(&x->alive) && atomic_load(&y->alive);
    UNLOCK();
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

SIM_API CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                              CUcontext srcContext, size_t ByteCount)
{
    CUresult rc = peer_check(dstContext, srcContext);
    return rc ? rc : copy1d(dstDevice, S_DEV, NULL, srcDevice, S_DEV, NULL, ByteCount, NULL, T_SYNC);
}
SIM_API CUresult cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                   CUcontext srcContext, size_t ByteCount)
{ return cuMemcpyPeer(dstDevice, dstContext, srcDevice, srcContext, ByteCount); }
SIM_API CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                   CUcontext srcContext, size_t ByteCount, CUstream hStream)
{
    CUresult rc = peer_check(dstContext, srcContext);
    return rc ? rc
              : copy1d(dstDevice, S_DEV, NULL, srcDevice, S_DEV, NULL, ByteCount, hStream, T_ASYNC);
}
SIM_API CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext,
                                        CUdeviceptr srcDevice, CUcontext srcContext,
                                        size_t ByteCount, CUstream hStream)
{ return cuMemcpyPeerAsync(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream); }

#define H2D(d, s, n, st, m) copy1d((d), S_DEV, NULL, HP(s), S_HOST, NULL, (n), (st), (m))
#define D2H(d, s, n, st, m) copy1d(HP(d), S_HOST, NULL, (s), S_DEV, NULL, (n), (st), (m))
#define D2D(d, s, n, st, m) copy1d((d), S_DEV, NULL, (s), S_DEV, NULL, (n), (st), (m))
#define H2A(a, o, s, n, st, m) copy1d((o), S_ARRAY, (struct sim_array *)(a), HP(s), S_HOST, NULL, (n), (st), (m))
#define A2H(d, a, o, n, st, m) copy1d(HP(d), S_HOST, NULL, (o), S_ARRAY, (struct sim_array *)(a), (n), (st), (m))
#define D2A(a, o, s, n) copy1d((o), S_ARRAY, (struct sim_array *)(a), (s), S_DEV, NULL, (n), NULL, T_SYNC)
#define A2D(d, a, o, n) copy1d((d), S_DEV, NULL, (o), S_ARRAY, (struct sim_array *)(a), (n), NULL, T_SYNC)
#define A2A(a, o, b, p, n) copy1d((o), S_ARRAY, (struct sim_array *)(a), (p), S_ARRAY, (struct sim_array *)(b), (n), NULL, T_SYNC)

SIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{ return H2D(dstDevice, srcHost, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{ return H2D(dstDevice, srcHost, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyHtoD(CUdeviceptr_v1 dstDevice, const void *srcHost, unsigned int ByteCount)
{ return H2D(dstDevice, srcHost, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{ return D2H(dstHost, srcDevice, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{ return D2H(dstHost, srcDevice, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyDtoH(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount)
{ return D2H(dstHost, srcDevice, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{ return D2D(dstDevice, srcDevice, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{ return D2D(dstDevice, srcDevice, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyDtoD(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice, unsigned int ByteCount)
{ return D2D(dstDevice, srcDevice, ByteCount, NULL, T_SYNC); }

SIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                      CUstream hStream)
{ return H2D(dstDevice, srcHost, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                           size_t ByteCount, CUstream hStream)
{ return H2D(dstDevice, srcHost, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyHtoDAsync(CUdeviceptr_v1 dstDevice, const void *srcHost,
                                   unsigned int ByteCount, CUstream hStream)
{ return H2D(dstDevice, srcHost, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{ return D2H(dstHost, srcDevice, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                           CUstream hStream)
{ return D2H(dstHost, srcDevice, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr_v1 srcDevice, unsigned int ByteCount,
                                   CUstream hStream)
{ return D2H(dstHost, srcDevice, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream)
{ return D2D(dstDevice, srcDevice, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                           size_t ByteCount, CUstream hStream)
{ return D2D(dstDevice, srcDevice, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyDtoDAsync(CUdeviceptr_v1 dstDevice, CUdeviceptr_v1 srcDevice,
                                   unsigned int ByteCount, CUstream hStream)
{ return D2D(dstDevice, srcDevice, ByteCount, hStream, T_ASYNC); }

/* ---- Arrays (offsets in bytes from the array's start) ---- */

SIM_API CUresult cuMemcpyHtoA_v2(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount)
{ return H2A(dstArray, dstOffset, srcHost, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyHtoA_v2_ptds(CUarray dstArray, size_t dstOffset, const void *srcHost,
                                      size_t ByteCount)
{ return H2A(dstArray, dstOffset, srcHost, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyHtoA(CUarray dstArray, unsigned int dstOffset, const void *srcHost,
                              unsigned int ByteCount)
{ return H2A(dstArray, dstOffset, srcHost, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyAtoH_v2(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount)
{ return A2H(dstHost, srcArray, srcOffset, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyAtoH_v2_ptds(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount)
{ return A2H(dstHost, srcArray, srcOffset, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyAtoH(void *dstHost, CUarray srcArray, unsigned int srcOffset,
                              unsigned int ByteCount)
{ return A2H(dstHost, srcArray, srcOffset, ByteCount, NULL, T_SYNC); }
SIM_API CUresult cuMemcpyHtoAAsync_v2(CUarray dstArray, size_t dstOffset, const void *srcHost,
                                      size_t ByteCount, CUstream hStream)
{ return H2A(dstArray, dstOffset, srcHost, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray dstArray, size_t dstOffset, const void *srcHost,
                                           size_t ByteCount, CUstream hStream)
{ return H2A(dstArray, dstOffset, srcHost, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyHtoAAsync(CUarray dstArray, unsigned int dstOffset, const void *srcHost,
                                   unsigned int ByteCount, CUstream hStream)
{ return H2A(dstArray, dstOffset, srcHost, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyAtoHAsync_v2(void *dstHost, CUarray srcArray, size_t srcOffset,
                                      size_t ByteCount, CUstream hStream)
{ return A2H(dstHost, srcArray, srcOffset, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyAtoHAsync_v2_ptsz(void *dstHost, CUarray srcArray, size_t srcOffset,
                                           size_t ByteCount, CUstream hStream)
{ return A2H(dstHost, srcArray, srcOffset, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyAtoHAsync(void *dstHost, CUarray srcArray, unsigned int srcOffset,
                                   unsigned int ByteCount, CUstream hStream)
{ return A2H(dstHost, srcArray, srcOffset, ByteCount, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpyDtoA_v2(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount)
{ return D2A(dstArray, dstOffset, srcDevice, ByteCount); }
SIM_API CUresult cuMemcpyDtoA_v2_ptds(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice,
                                      size_t ByteCount)
{ return D2A(dstArray, dstOffset, srcDevice, ByteCount); }
SIM_API CUresult cuMemcpyDtoA(CUarray dstArray, unsigned int dstOffset, CUdeviceptr_v1 srcDevice,
                              unsigned int ByteCount)
{ return D2A(dstArray, dstOffset, srcDevice, ByteCount); }
SIM_API CUresult cuMemcpyAtoD_v2(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount)
{ return A2D(dstDevice, srcArray, srcOffset, ByteCount); }
SIM_API CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset,
                                      size_t ByteCount)
{ return A2D(dstDevice, srcArray, srcOffset, ByteCount); }
SIM_API CUresult cuMemcpyAtoD(CUdeviceptr_v1 dstDevice, CUarray srcArray, unsigned int srcOffset,
                              unsigned int ByteCount)
{ return A2D(dstDevice, srcArray, srcOffset, ByteCount); }
SIM_API CUresult cuMemcpyAtoA_v2(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset,
                                 size_t ByteCount)
{ return A2A(dstArray, dstOffset, srcArray, srcOffset, ByteCount); }
SIM_API CUresult cuMemcpyAtoA_v2_ptds(CUarray dstArray, size_t dstOffset, CUarray srcArray,
                                      size_t srcOffset, size_t ByteCount)
{ return A2A(dstArray, dstOffset, srcArray, srcOffset, ByteCount); }
SIM_API CUresult cuMemcpyAtoA(CUarray dstArray, unsigned int dstOffset, CUarray srcArray,
                              unsigned int srcOffset, unsigned int ByteCount)
{ return A2A(dstArray, dstOffset, srcArray, srcOffset, ByteCount); }

/* ---- 2-D and 3-D copies ---- */

static CUresult make_side(struct side *s, CUmemorytype t, const void *host, CUdeviceptr dev,
                          CUarray arr, unsigned long long pitch, unsigned long long height,
                          unsigned long long x, unsigned long long y, unsigned long long z)
{
    switch (t) {
    case CU_MEMORYTYPE_HOST: *s = (struct side){S_HOST, HP(host), NULL, pitch, height, 0}; break;
    case CU_MEMORYTYPE_DEVICE: *s = (struct side){S_DEV, dev, NULL, pitch, height, 0}; break;
    case CU_MEMORYTYPE_UNIFIED: *s = (struct side){S_ANY, dev, NULL, pitch, height, 0}; break;
    case CU_MEMORYTYPE_ARRAY: {
        struct sim_array *a = obj_get(arr, O_ARRAY);
        if (!a)
            return CUDA_ERROR_INVALID_VALUE;
        unsigned long long rows, slices, row = array_row(a, &rows, &slices);
        if (x >= row || y >= rows || z >= slices)
            return CUDA_ERROR_INVALID_VALUE;
        *s = (struct side){S_ARRAY, z * row * rows + y * row + x, a, row, rows, 0};
        return CUDA_SUCCESS;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    s->addr += z * pitch * height + y * pitch + x;
    return CUDA_SUCCESS;
}

static CUresult copy3d(const CUDA_MEMCPY3D_PEER *p, CUstream s, int mode)
{
    if (!INITED())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    if (p->srcLOD || p->dstLOD)
        return CUDA_ERROR_INVALID_VALUE;
    struct xfer x = {.w = p->WidthInBytes, .h = p->Height ? p->Height : 1,
                     .d = p->Depth ? p->Depth : 1};
    LOCK();
    CUresult rc = make_side(&x.dst, p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray,
                            p->dstPitch, p->dstHeight, p->dstXInBytes, p->dstY, p->dstZ);
    if (!rc)
        rc = make_side(&x.src, p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray,
                       p->srcPitch, p->srcHeight, p->srcXInBytes, p->srcY, p->srcZ);
    UNLOCK();
    if (rc)
        return rc;
    /* A pitch of 0 is allowed for a single row (and a single slice). */
    if (x.dst.type != S_ARRAY && !x.dst.pitch && x.h == 1)
        x.dst.pitch = x.w;
    if (x.src.type != S_ARRAY && !x.src.pitch && x.h == 1)
        x.src.pitch = x.w;
    if (x.dst.type != S_ARRAY && !x.dst.height && x.d == 1)
        x.dst.height = x.h;
    if (x.src.type != S_ARRAY && !x.src.height && x.d == 1)
        x.src.height = x.h;
    /* The driver caps pitches of linear memory (CU_DEVICE_ATTRIBUTE_MAX_PITCH). */
    if (x.dst.pitch > (1ULL << 31) || x.src.pitch > (1ULL << 31))
        return CUDA_ERROR_INVALID_VALUE;
    return issue(&x, s, mode);
}

static CUresult copy_from3d(const CUDA_MEMCPY3D *c, CUstream s, int mode)
{
    if (!c)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    if (c->reserved0 || c->reserved1)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUDA_MEMCPY3D_PEER p = {
        .srcXInBytes = c->srcXInBytes, .srcY = c->srcY, .srcZ = c->srcZ, .srcLOD = c->srcLOD,
        .srcMemoryType = c->srcMemoryType, .srcHost = c->srcHost, .srcDevice = c->srcDevice,
        .srcArray = c->srcArray, .srcPitch = c->srcPitch, .srcHeight = c->srcHeight,
        .dstXInBytes = c->dstXInBytes, .dstY = c->dstY, .dstZ = c->dstZ, .dstLOD = c->dstLOD,
        .dstMemoryType = c->dstMemoryType, .dstHost = c->dstHost, .dstDevice = c->dstDevice,
        .dstArray = c->dstArray, .dstPitch = c->dstPitch, .dstHeight = c->dstHeight,
        .WidthInBytes = c->WidthInBytes, .Height = c->Height, .Depth = c->Depth};
    return copy3d(&p, s, mode);
}

static CUresult copy_from3d_v1(const CUDA_MEMCPY3D_v1 *c, CUstream s, int mode)
{
    if (!c)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUDA_MEMCPY3D p = {
        .srcXInBytes = c->srcXInBytes, .srcY = c->srcY, .srcZ = c->srcZ, .srcLOD = c->srcLOD,
        .srcMemoryType = c->srcMemoryType, .srcHost = c->srcHost, .srcDevice = c->srcDevice,
        .srcArray = c->srcArray, .reserved0 = c->reserved0, .srcPitch = c->srcPitch,
        .srcHeight = c->srcHeight, .dstXInBytes = c->dstXInBytes, .dstY = c->dstY,
        .dstZ = c->dstZ, .dstLOD = c->dstLOD, .dstMemoryType = c->dstMemoryType,
        .dstHost = c->dstHost, .dstDevice = c->dstDevice, .dstArray = c->dstArray,
        .reserved1 = c->reserved1, .dstPitch = c->dstPitch, .dstHeight = c->dstHeight,
        .WidthInBytes = c->WidthInBytes, .Height = c->Height, .Depth = c->Depth};
    return copy_from3d(&p, s, mode);
}

static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream s, int mode)
{
    if (!c)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUDA_MEMCPY3D_PEER p = {
        .srcXInBytes = c->srcXInBytes, .srcY = c->srcY, .srcMemoryType = c->srcMemoryType,
        .srcHost = c->srcHost, .srcDevice = c->srcDevice, .srcArray = c->srcArray,
        .srcPitch = c->srcPitch, .srcHeight = c->srcY + c->Height,
        .dstXInBytes = c->dstXInBytes, .dstY = c->dstY, .dstMemoryType = c->dstMemoryType,
        .dstHost = c->dstHost, .dstDevice = c->dstDevice, .dstArray = c->dstArray,
        .dstPitch = c->dstPitch, .dstHeight = c->dstY + c->Height,
        .WidthInBytes = c->WidthInBytes, .Height = c->Height, .Depth = 1};
    if (!c->Height)
        return INITED() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
    /* The driver's rule for 2-D copies: pitches at least the width. */
    if ((c->srcMemoryType != CU_MEMORYTYPE_ARRAY && c->srcPitch < c->WidthInBytes && c->Height > 1) ||
        (c->dstMemoryType != CU_MEMORYTYPE_ARRAY && c->dstPitch < c->WidthInBytes && c->Height > 1))
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return copy3d(&p, s, mode);
}

static CUresult copy2d_v1(const CUDA_MEMCPY2D_v1 *c, CUstream s, int mode)
{
    if (!c)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUDA_MEMCPY2D p = {
        .srcXInBytes = c->srcXInBytes, .srcY = c->srcY, .srcMemoryType = c->srcMemoryType,
        .srcHost = c->srcHost, .srcDevice = c->srcDevice, .srcArray = c->srcArray,
        .srcPitch = c->srcPitch, .dstXInBytes = c->dstXInBytes, .dstY = c->dstY,
        .dstMemoryType = c->dstMemoryType, .dstHost = c->dstHost, .dstDevice = c->dstDevice,
        .dstArray = c->dstArray, .dstPitch = c->dstPitch, .WidthInBytes = c->WidthInBytes,
        .Height = c->Height};
    return copy2d(&p, s, mode);
}

SIM_API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy) { return copy2d(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy) { return copy2d(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy2D(const CUDA_MEMCPY2D_v1 *pCopy) { return copy2d_v1(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy) { return copy2d(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{ return copy2d(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy2DUnaligned(const CUDA_MEMCPY2D_v1 *pCopy)
{ return copy2d_v1(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{ return copy2d(pCopy, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{ return copy2d(pCopy, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D_v1 *pCopy, CUstream hStream)
{ return copy2d_v1(pCopy, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *pCopy) { return copy_from3d(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *pCopy)
{ return copy_from3d(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy3D(const CUDA_MEMCPY3D_v1 *pCopy) { return copy_from3d_v1(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{ return copy_from3d(pCopy, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{ return copy_from3d(pCopy, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpy3DAsync(const CUDA_MEMCPY3D_v1 *pCopy, CUstream hStream)
{ return copy_from3d_v1(pCopy, hStream, T_ASYNC); }

static CUresult copy3d_peer(const CUDA_MEMCPY3D_PEER *p, CUstream s, int mode)
{
    if (!p)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = peer_check(p->dstContext, p->srcContext);
    return rc ? rc : copy3d(p, s, mode);
}

SIM_API CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *pCopy) { return copy3d_peer(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *pCopy)
{ return copy3d_peer(pCopy, NULL, T_SYNC); }
SIM_API CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream)
{ return copy3d_peer(pCopy, hStream, T_ASYNC); }
SIM_API CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream)
{ return copy3d_peer(pCopy, hStream, T_ASYNC); }

/* ---- Sets ---- */

static CUresult set2d(CUdeviceptr dst, unsigned long long pitch, unsigned val, unsigned esize,
                      unsigned long long width, unsigned long long height, CUstream s, int mode)
{
    if (!INITED())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (width > (1ULL << 48) || height > (1ULL << 48))
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long w = width * esize;
    if (dst % esize || (height > 1 && (pitch < w || pitch % esize)))
        return CUDA_ERROR_INVALID_VALUE;
    struct xfer x = {.dst = {S_ANY, dst, NULL, height > 1 ? pitch : w, height},
                     .w = w, .h = height, .d = 1, .set = 1, .esize = esize, .val = val};
    return issue(&x, s, mode);
}

#define SET1(d, v, e, n, s, m) set2d((d), 0, (v), (e), (n), 1, (s), (m))

SIM_API CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{ return SET1(dstDevice, uc, 1, N, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{ return SET1(dstDevice, uc, 1, N, CU_STREAM_PER_THREAD, T_ASYNC); }
SIM_API CUresult cuMemsetD8(CUdeviceptr_v1 dstDevice, unsigned char uc, unsigned int N)
{ return SET1(dstDevice, uc, 1, N, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{ return SET1(dstDevice, us, 2, N, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N)
{ return SET1(dstDevice, us, 2, N, CU_STREAM_PER_THREAD, T_ASYNC); }
SIM_API CUresult cuMemsetD16(CUdeviceptr_v1 dstDevice, unsigned short us, unsigned int N)
{ return SET1(dstDevice, us, 2, N, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{ return SET1(dstDevice, ui, 4, N, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{ return SET1(dstDevice, ui, 4, N, CU_STREAM_PER_THREAD, T_ASYNC); }
SIM_API CUresult cuMemsetD32(CUdeviceptr_v1 dstDevice, unsigned int ui, unsigned int N)
{ return SET1(dstDevice, ui, 4, N, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{ return SET1(dstDevice, uc, 1, N, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                      CUstream hStream)
{ return SET1(dstDevice, uc, 1, N, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{ return SET1(dstDevice, us, 2, N, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                       CUstream hStream)
{ return SET1(dstDevice, us, 2, N, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{ return SET1(dstDevice, ui, 4, N, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                       CUstream hStream)
{ return SET1(dstDevice, ui, 4, N, hStream, T_ASYNC); }

SIM_API CUresult cuMemsetD2D8_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                 size_t Width, size_t Height)
{ return set2d(dstDevice, dstPitch, uc, 1, Width, Height, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                      size_t Width, size_t Height)
{ return set2d(dstDevice, dstPitch, uc, 1, Width, Height, CU_STREAM_PER_THREAD, T_ASYNC); }
SIM_API CUresult cuMemsetD2D8(CUdeviceptr_v1 dstDevice, unsigned int dstPitch, unsigned char uc,
                              unsigned int Width, unsigned int Height)
{ return set2d(dstDevice, dstPitch, uc, 1, Width, Height, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD2D16_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                  size_t Width, size_t Height)
{ return set2d(dstDevice, dstPitch, us, 2, Width, Height, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                       size_t Width, size_t Height)
{ return set2d(dstDevice, dstPitch, us, 2, Width, Height, CU_STREAM_PER_THREAD, T_ASYNC); }
SIM_API CUresult cuMemsetD2D16(CUdeviceptr_v1 dstDevice, unsigned int dstPitch, unsigned short us,
                               unsigned int Width, unsigned int Height)
{ return set2d(dstDevice, dstPitch, us, 2, Width, Height, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD2D32_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                  size_t Width, size_t Height)
{ return set2d(dstDevice, dstPitch, ui, 4, Width, Height, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                       size_t Width, size_t Height)
{ return set2d(dstDevice, dstPitch, ui, 4, Width, Height, CU_STREAM_PER_THREAD, T_ASYNC); }
SIM_API CUresult cuMemsetD2D32(CUdeviceptr_v1 dstDevice, unsigned int dstPitch, unsigned int ui,
                               unsigned int Width, unsigned int Height)
{ return set2d(dstDevice, dstPitch, ui, 4, Width, Height, NULL, T_SET_SYNC); }
SIM_API CUresult cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                   size_t Width, size_t Height, CUstream hStream)
{ return set2d(dstDevice, dstPitch, uc, 1, Width, Height, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                        size_t Width, size_t Height, CUstream hStream)
{ return set2d(dstDevice, dstPitch, uc, 1, Width, Height, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD2D16Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                    size_t Width, size_t Height, CUstream hStream)
{ return set2d(dstDevice, dstPitch, us, 2, Width, Height, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                         size_t Width, size_t Height, CUstream hStream)
{ return set2d(dstDevice, dstPitch, us, 2, Width, Height, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                    size_t Width, size_t Height, CUstream hStream)
{ return set2d(dstDevice, dstPitch, ui, 4, Width, Height, hStream, T_ASYNC); }
SIM_API CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                         size_t Width, size_t Height, CUstream hStream)
{ return set2d(dstDevice, dstPitch, ui, 4, Width, Height, hStream, T_ASYNC); }
