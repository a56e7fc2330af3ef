/* The simulated CUDA driver (libcuda.so.1).  Kernel launch onto the device's
 * schedule: the device runs one process's work at a time across every process
 * that shares the CGPU_SIM_STATE file (a private schedule without one); a
 * process's kernels run in launch order, and processes with work take turns
 * in timeslices (sim_timeline.c).  A launch adds the kernel's duration to the
 * process's queued work and returns its mark.  A process queues at most about
 * CGPU_SIM_TIMESLICE_NS of its own work ahead of the device before a launch
 * blocks, as a full GPU queue does. */
#include "cuda_sim.h"

static struct sim_tl_dev private_tl[SIM_MAX_DEVICES];
static struct sim_work private_work[SIM_MAX_DEVICES];

/* drv.mu held (cuInit; again in a forked child, which starts from nothing). */
void timeline_init(void)
{
    struct sim_state_slot *slot = drv.st && drv.slot >= 0 ? &drv.st->f->slots[drv.slot] : NULL;
    for (int i = 0; i < SIM_MAX_DEVICES; i++) {
        int sdev = drv.sdev[i];
        struct sim_tl *tl = slot && sdev >= 0 ? sim_slot_tl(slot, sdev, 1) : NULL;
        struct sim_sched *s = &drv.sched[i];
        *s = (struct sim_sched){.slice = drv.cfg.slice_ns, .sw = drv.cfg.switch_ns, .sdev = -1};
        if (tl) {
            int t = (int)(tl - slot->tl);
            s->f = drv.st->f;
            s->d = &drv.st->f->dev[sdev];
            s->sdev = sdev;
            s->alive = sim_pid_alive;
            drv.work[i] = &slot->work[t];
            drv.work_id[i] = drv.slot * SIM_SLOT_TL + t;
        } else { /* no state file, or this process already has SIM_SLOT_TL devices there */
            memset(&private_tl[i], 0, sizeof private_tl[i]);
            memset(&private_work[i], 0, sizeof private_work[i]);
            sim_tl_dev_init(&private_tl[i]);
            s->d = &private_tl[i];
            s->priv = &private_work[i];
            drv.work[i] = &private_work[i];
            drv.work_id[i] = 0;
        }
        drv.last_start[i] = 0;
    }
}

CUresult launch_work(CUstream s, unsigned long long ns)
{
    NEED_INIT();
    for (;;) {
        struct sim_ctx *c;
        struct sim_queue *q;
        LOCK();
        CUresult rc = stream_queue(s, &c, &q);
        void *graph = rc ? NULL : stream_capture(s);
        if (rc || graph) { /* a capturing stream records the kernel in its graph */
            if (graph)
                rc = capture_kernel(graph, ns);
            UNLOCK();
            return rc;
        }
        int phys = c->phys;
        const struct sim_sched *sc = &drv.sched[phys];
        struct sim_work *w = drv.work[phys];
        unsigned long long depth = drv.cfg.queue_depth, slice = drv.cfg.timeslice_ns;
        unsigned long long now = sim_now_ns();
        sim_sched_lock(sc);
        sim_sched_advance(sc, now);
        unsigned long long done = atomic_load_explicit(&w->done, memory_order_relaxed);
        unsigned long long oldest = q->ends[q->head % depth], wait = 0;
        if (oldest > done) /* queue_depth kernels pending on this stream */
            wait = oldest;
        else if (slice && drv.last_start[phys] > done + slice) /* a time slice queued ahead */
            wait = drv.last_start[phys] - slice;
        if (wait) {
            sim_sched_unlock(sc);
            UNLOCK();
            wait_mark(phys, wait);
            continue;
        }
        unsigned long long pending = sim_sched_pending(sc);
        unsigned long long start = w->queued;
        unsigned long long mark = pending + ns <= SIM_TL_AHEAD_NS || !pending
                                      ? sim_sched_queue(sc, drv.work_id[phys], w, ns)
                                      : 0;
        sim_sched_unlock(sc);
        if (!mark && ns) { /* the device's queue reaches SIM_TL_AHEAD_NS, or its run queue is full */
            UNLOCK();
            sim_sleep_until(now + (pending > ns ? ns : pending) + 1000);
            continue;
        }
        drv.last_start[phys] = start;
        q->ends[q->head++ % depth] = mark;
        q->last_end = mark;
        if (mark > c->last_end)
            c->last_end = mark;
        UNLOCK();
        return CUDA_SUCCESS;
    }
}

/* The duration of one launch of `f`: cgpu_sim_busy reads its first
 * parameter (kernelParams[0], or the first 8 bytes of the extra buffer); and in *stack (if
 * not NULL) the per-thread stack its launch needs. */
CUresult kernel_duration(CUfunction f, void **params, void **extra, unsigned long long *ns, unsigned *stack)
{
    NEED_INIT();
    LOCK();
    struct sim_func *fn = obj_get(f, O_FUNC);
    int busy = fn ? fn->busy : 0;
    if (stack)
        *stack = fn ? fn->stack : 0;
    UNLOCK();
    if (!fn)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!busy) {
        *ns = drv.cfg.kernel_ns;
        return CUDA_SUCCESS;
    }
    const void *arg = NULL;
    if (params && params[0]) {
        arg = params[0];
    } else if (extra) {
        void *buf = NULL;
        size_t size = 0;
        for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END && i < 64; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
                size = *(size_t *)extra[i + 1];
        }
        if (buf && size >= sizeof(unsigned long long))
            arg = buf;
    }
    if (!arg)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned long long v;
    memcpy(&v, arg, sizeof v);
    if (v > SIM_TL_MAX_KERNEL_NS)
        return CUDA_ERROR_INVALID_VALUE;
    *ns = v;
    return CUDA_SUCCESS;
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, CUstream s, void **params, void **extra)
{
    unsigned long long ns;
    unsigned stack;
    CUresult rc = kernel_duration(f, params, extra, &ns, &stack);
    if (rc)
        return rc;
    if (!gx || !gy || !gz || !bx || !by || !bz || (unsigned long long)bx * by * bz > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (stack > 1024 && (rc = ctx_stack_for_launch(stack)) != CUDA_SUCCESS) /* past the default */
        return rc;
    return launch_work(s, ns);
}

SIM_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                                void **extra)
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream,
                  kernelParams, extra);
}

SIM_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX,
                                     unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream,
                                     void **kernelParams, void **extra)
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream,
                  kernelParams, extra);
}

static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
    if (!config)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                  config->blockDimY, config->blockDimZ, config->hStream, params, extra);
}

SIM_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                  void **extra)
{ return launch_ex(config, f, kernelParams, extra); }
SIM_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                       void **kernelParams, void **extra)
{ return launch_ex(config, f, kernelParams, extra); }

SIM_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                           unsigned int gridDimY, unsigned int gridDimZ,
                                           unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes,
                                           CUstream hStream, void **kernelParams)
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream,
                  kernelParams, NULL);
}

SIM_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                unsigned int gridDimY, unsigned int gridDimZ,
                                                unsigned int blockDimX, unsigned int blockDimY,
                                                unsigned int blockDimZ, unsigned int sharedMemBytes,
                                                CUstream hStream, void **kernelParams)
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream,
                  kernelParams, NULL);
}

/* ---- tensor maps (TMA descriptors) ------------------------------------------------ */

/* A kernel reads a tensor map (Hopper's TMA) as one of its parameters; kernels compute
 * nothing here, so the map only has to pass the driver's checks (cuda.h's rules for
 * cuTensorMapEncodeTiled) and hold its address. The 128 opaque bytes are the address, then
 * zeros. */
static int tensor_address_ok(const CUtensorMap *map, const void *address)
{
    return map && ((uintptr_t)map % 64) == 0 && address && ((uintptr_t)address % 16) == 0;
}

static void tensor_map_fill(CUtensorMap *map, void *address)
{
    memset(map, 0, sizeof *map);
    memcpy(map, &address, sizeof address);
}

SIM_API CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                        cuuint32_t tensorRank, void *globalAddress,
                                        const cuuint64_t *globalDim,
                                        const cuuint64_t *globalStrides,
                                        const cuuint32_t *boxDim,
                                        const cuuint32_t *elementStrides,
                                        CUtensorMapInterleave interleave,
                                        CUtensorMapSwizzle swizzle,
                                        CUtensorMapL2promotion l2Promotion,
                                        CUtensorMapFloatOOBfill oobFill)
{
    (void)swizzle, (void)l2Promotion, (void)oobFill;
    NEED_INIT();
    if (!tensor_address_ok(tensorMap, globalAddress) || !globalDim || !boxDim || !elementStrides)
        return CUDA_ERROR_INVALID_VALUE;
    if ((unsigned)tensorDataType > CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B || tensorRank < 1 ||
        tensorRank > 5 || (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE && tensorRank < 3))
        return CUDA_ERROR_INVALID_VALUE;
    if (tensorRank > 1 && !globalStrides)
        return CUDA_ERROR_INVALID_VALUE;
    for (cuuint32_t i = 0; i < tensorRank; i++) {
        if (globalDim[i] == 0 || globalDim[i] > (1ull << 32) || boxDim[i] == 0 || boxDim[i] > 256 ||
            elementStrides[i] == 0 || elementStrides[i] > 8)
            return CUDA_ERROR_INVALID_VALUE;
        if (i + 1 < tensorRank && (globalStrides[i] % 16 || globalStrides[i] >= (1ull << 40)))
            return CUDA_ERROR_INVALID_VALUE;
    }
    tensor_map_fill(tensorMap, globalAddress);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
    NEED_INIT();
    if (!tensor_address_ok(tensorMap, globalAddress))
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(tensorMap, &globalAddress, sizeof globalAddress);
    return CUDA_SUCCESS;
}
