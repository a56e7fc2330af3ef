/* The simulated CUDA driver (libcuda.so.1).  Kernel launch on the timeline:
 * the device runs one kernel at a time across every process that shares the
 * CGPU_SIM_STATE file (a private timeline without one).  A kernel starts at
 * max(its launch, the end of its stream's earlier work, the end of the
 * device's queued work) and runs for its duration (cuda_module.c).  A
 * process queues at most about a time slice (CGPU_SIM_TIMESLICE_NS) ahead of
 * its running kernel, so saturating processes take turns on the device as
 * under time-slicing. */
#include "cuda_sim.h"

static struct sim_tl_dev private_tl[SIM_MAX_DEVICES];

/* drv.mu held (cuInit). */
void timeline_init(void)
{
    struct sim_state_slot *slot = drv.st && drv.slot >= 0 ? &drv.st->f->slots[drv.slot] : NULL;
    for (int i = 0; i < SIM_MAX_DEVICES; i++) {
        int sdev = drv.sdev[i];
        drv.tl[i] = slot && sdev >= 0 ? &drv.st->f->dev[sdev] : &private_tl[i];
        drv.slot_tl[i] = slot && sdev >= 0 ? sim_slot_tl(slot, sdev, 1) : NULL;
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
        unsigned long long now = sim_now_ns(), depth = drv.cfg.queue_depth;
        unsigned long long oldest = q->ends[q->head % depth];
        if (oldest > now) { /* queue_depth kernels pending on this stream */
            UNLOCK();
            wait_until(oldest);
            continue;
        }
        int phys = c->phys;
        unsigned long long slice = drv.cfg.timeslice_ns;
        if (slice && drv.last_start[phys] > now + slice) { /* take turns with other processes */
            unsigned long long t = drv.last_start[phys] - slice;
            UNLOCK();
            wait_until(t);
            continue;
        }
        unsigned long long start, ready = q->last_end > now ? q->last_end : now;
        if (q == &c->q_legacy && c->last_end > ready)
            ready = c->last_end;
        unsigned long long wait = sim_tl_reserve(drv.tl[phys], now, ready, ns, &start);
        if (wait) { /* the device's queue reaches SIM_TL_AHEAD_NS */
            UNLOCK();
            wait_until(wait);
            continue;
        }
        unsigned long long end = start + ns;
        drv.last_start[phys] = start;
        sim_tl_add(&drv.tl[phys]->tl, start, end);
        if (drv.slot_tl[phys]) {
            sim_tl_add(drv.slot_tl[phys], start, end);
            atomic_fetch_add_explicit(&drv.st->f->slots[drv.slot].busy[drv.sdev[phys]], ns,
                                      memory_order_relaxed);
        }
        q->ends[q->head++ % depth] = end;
        q->last_end = end;
        if (end > c->last_end)
            c->last_end = end;
        UNLOCK();
        return CUDA_SUCCESS;
    }
}

/* The duration of one launch of `f`: cgpu_sim_busy reads its first
 * parameter (kernelParams[0], or the first 8 bytes of the extra buffer). */
CUresult kernel_duration(CUfunction f, void **params, void **extra, unsigned long long *ns)
{
    NEED_INIT();
    LOCK();
    struct sim_func *fn = obj_get(f, O_FUNC);
    int busy = fn ? fn->busy : 0;
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
    CUresult rc = kernel_duration(f, params, extra, &ns);
    if (rc)
        return rc;
    if (!gx || !gy || !gz || !bx || !by || !bz || (unsigned long long)bx * by * bz > 1024)
        return CUDA_ERROR_INVALID_VALUE;
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
