/* The simulated CUDA driver (libcuda.so.1).  The pieces every other driver
 * file shares, below all of them: the calling thread's current context (its
 * context stack), the stream queues (which queue a stream handle stands for),
 * and waiting for a time on the timeline.  It calls only cuda_core.c and the
 * timeline, never a file above it (tests/sim/test_sim_layers.py keeps it so). */
#include "cuda_sim.h"

#include "cgpu_sizes.h"

#include <stdlib.h>

/* ------------------------------------------------------------------------ */
/* The current context                                                       */

_Thread_local struct sim_ctx *tls_stack[CTX_STACK_MAX];
_Thread_local int tls_depth;
_Thread_local unsigned tls_gen;

struct sim_ctx *tls_top(void)
{
    if (tls_gen != drv.gen) {
        tls_gen = drv.gen;
        tls_depth = 0;
    }
    return tls_depth ? tls_stack[tls_depth - 1] : NULL;
}

CUresult cur_ctx(struct sim_ctx **out)
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

/* ------------------------------------------------------------------------ */
/* Stream queues                                                             */

/* drv.mu held. */
CUresult stream_ctx(CUstream s, struct sim_ctx **out)
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

CUresult stream_queue(CUstream s, struct sim_ctx **ctx, struct sim_queue **q)
{
    CUresult rc = stream_ctx(s, ctx);
    if (rc)
        return rc;
    struct sim_stream *st = obj_get(s, O_STREAM);
    *q = st ? &st->q : s == CU_STREAM_PER_THREAD ? &(*ctx)->q_ptds : &(*ctx)->q_legacy;
    return CUDA_SUCCESS;
}

CUresult stream_check(CUstream s)
{
    NEED_INIT();
    struct sim_ctx *c;
    LOCK();
    CUresult rc = stream_ctx(s, &c);
    UNLOCK();
    return rc;
}

static int queue_init(struct sim_queue *q)
{
    size_t bytes = (size_t)drv.cfg.queue_depth * sizeof *q->ends;
    if (!q->ends && !(q->ends = malloc(bytes)))
        return -1;
    memset(q->ends, 0, bytes);
    q->last_end = 0;
    q->head = 0;
    return 0;
}

int ctx_queues_init(struct sim_ctx *c)
{
    c->last_end = 0;
    return queue_init(&c->q_legacy) || queue_init(&c->q_ptds) ? -1 : 0;
}

/* ------------------------------------------------------------------------ */
/* Waiting                                                                   */

/* How the work that waits for the device is run: cuda_transfer.c registers it
 * (its queued copies and sets), so that this file stays below it. */
static void (*_Atomic settle_fn)(void);

void wait_on_settle(void (*settle)(void))
{
    atomic_store(&settle_fn, settle);
}

unsigned long long work_done(int phys)
{
    const struct sim_sched *s = &drv.sched[phys];
    struct sim_work *w = drv.work[phys];
    if (!s->d || !w)
        return 0;
    sim_sched_lock(s);
    sim_sched_advance(s, sim_now_ns());
    unsigned long long d = atomic_load_explicit(&w->done, memory_order_acquire);
    sim_sched_unlock(s);
    return d;
}

unsigned long long mark_time(int phys, unsigned long long mark)
{
    const struct sim_sched *s = &drv.sched[phys];
    struct sim_work *w = drv.work[phys];
    if (!s->d || !w)
        return sim_now_ns();
    sim_sched_lock(s);
    unsigned long long t = sim_work_time(w, mark);
    sim_sched_unlock(s);
    return t ? t : sim_now_ns();
}

void wait_mark(int phys, unsigned long long mark)
{
    /* Others' later launches decide when our work runs: look, then sleep until the
     * earliest it could be done (were the device ours from now on), and look again. */
    for (;;) {
        unsigned long long d = work_done(phys);
        if (d >= mark)
            break;
        sim_sleep_until(sim_now_ns() + (mark - d));
    }
    void (*settle)(void) = atomic_load(&settle_fn);
    if (settle)
        settle(); /* copies and sets queued behind that work */
}

/* ------------------------------------------------------------------------ */
/* Stream capture                                                            */

static const struct sim_capture_ops *_Atomic capture_ops;

void capture_register(const struct sim_capture_ops *ops)
{
    atomic_store(&capture_ops, ops);
}

void *stream_capture(CUstream s)
{
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return NULL;
    struct sim_stream *st = obj_get(s, O_STREAM);
    return st ? st->capture : NULL;
}

CUresult capture_alloc(void *graph, int phys, unsigned long long bytes, CUdeviceptr *out)
{
    const struct sim_capture_ops *ops = atomic_load(&capture_ops);
    return ops ? ops->alloc(graph, phys, bytes, out) : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult capture_free(void *graph, CUdeviceptr dptr)
{
    const struct sim_capture_ops *ops = atomic_load(&capture_ops);
    return ops ? ops->free(graph, dptr) : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult capture_kernel(void *graph, unsigned long long ns)
{
    const struct sim_capture_ops *ops = atomic_load(&capture_ops);
    return ops ? ops->kernel(graph, ns) : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

int graph_mem_address(CUdeviceptr dptr)
{
    const struct sim_capture_ops *ops = atomic_load(&capture_ops);
    return ops && ops->is_graph_mem(dptr);
}

/* ------------------------------------------------------------------------ */
/* The per-context heaps (the stack, the malloc heap, the printf FIFO)       */

/* The device memory the per-context heaps take (cgpu_sizes.h, by which the shim charges them):
 * the stack for every thread the device can hold at once (the resident threads of an SM
 * times the SMs: 1 KiB is 264 MiB on an H100), the malloc heap and the printf FIFO their size,
 * in whole pages of the allocation granularity.  The defaults are part of the context's overhead
 * (CGPU_SIM_CTX_OVERHEAD); only what the limits take beyond them is charged apart. */
#define SIM_SM_COUNT 132ULL
#define SIM_THREADS_PER_SM 2048ULL

unsigned long long heaps_beyond_defaults(const size_t *limits)
{
    static const CUlimit heaps[] = {CU_LIMIT_STACK_SIZE, CU_LIMIT_MALLOC_HEAP_SIZE, CU_LIMIT_PRINTF_FIFO_SIZE};
    unsigned long long total = 0;
    for (size_t i = 0; i < sizeof heaps / sizeof heaps[0]; i++)
        total += cgpu_heap_beyond_default(heaps[i], limits[heaps[i]], SIM_THREADS_PER_SM * SIM_SM_COUNT,
                                          drv.cfg.granularity);
    return total;
}

/* A launch of a kernel that needs more stack than the context has: the driver "automatically
 * increases the per-thread stack size for each kernel launch as needed", and does not reset it
 * (cuda.h, CU_LIMIT_STACK_SIZE).  The larger stack is reserved now, as cuCtxSetLimit would, or
 * the launch fails with CUDA_ERROR_OUT_OF_MEMORY. */
CUresult ctx_stack_for_launch(unsigned need)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc || need <= CGPU_STACK_DEFAULT)
        return rc;
    if (need > SIM_STACK_MAX) /* more than a thread may have: the driver cannot run it */
        return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
    LOCK();
    size_t old = c->limits[CU_LIMIT_STACK_SIZE];
    if (need > old) {
        c->limits[CU_LIMIT_STACK_SIZE] = round_up(need, 16);
        unsigned long long want = heaps_beyond_defaults(c->limits);
        if (want > c->heap_charge && (rc = charge(c->phys, want - c->heap_charge)) != CUDA_SUCCESS)
            c->limits[CU_LIMIT_STACK_SIZE] = old;
        else if (want > c->heap_charge)
            c->heap_charge = want;
    }
    UNLOCK();
    return rc;
}
