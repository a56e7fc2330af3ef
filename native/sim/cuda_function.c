/* The simulated CUDA driver (libcuda.so.1).  What a program asks of a loaded
 * function or kernel: its attributes (settable where the driver lets them be
 * set), its module or library, and the occupancy queries that libraries such
 * as cuBLAS and PyTorch size their launches with.
 *
 * A simulated function has no code, so it is described as a small compiled
 * kernel for the simulated device (compute capability 9.0): 32 registers a
 * thread, no static shared, constant or local memory.  Occupancy follows the
 * device's limits: 2048 threads, 32 blocks, 65536 registers and 228 KiB of
 * shared memory a multiprocessor (1 KiB of it reserved per block). */
#include "cuda_sim.h"

#define REGS_PER_THREAD 32
#define SM_THREADS 2048
#define SM_BLOCKS 32
#define SM_REGS 65536
#define SM_SMEM 233472
#define SM_SMEM_RESERVED 1024
#define SMEM_OPTIN 232448
#define SM_COUNT 132

/* The live function or kernel behind `h` (drv.mu taken and dropped). */
static CUresult func_of(const void *h, struct sim_func **out)
{
    NEED_INIT();
    LOCK();
    struct sim_func *f = obj_get(h, O_FUNC);
    UNLOCK();
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = f;
    return CUDA_SUCCESS;
}

static CUresult get_attribute(int *pi, CUfunction_attribute a, struct sim_func *f)
{
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = (int)f->frame; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = REGS_PER_THREAD; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dyn_smem; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = f->carveout; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *pi = f->non_portable_cluster; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        *pi = CU_CLUSTER_SCHEDULING_POLICY_DEFAULT;
        break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* Only these can be set, within the device's limits (cuda.h). */
static CUresult set_attribute(struct sim_func *f, CUfunction_attribute a, int value)
{
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (value < 0 || value > SMEM_OPTIN)
            return CUDA_ERROR_INVALID_VALUE;
        f->max_dyn_smem = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if (value < -1 || value > 100)
            return CUDA_ERROR_INVALID_VALUE;
        f->carveout = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
        if (value != 0 && value != 1)
            return CUDA_ERROR_INVALID_VALUE;
        f->non_portable_cluster = value;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        return value == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

SIM_API CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    struct sim_func *f;
    CUresult rc = func_of(hfunc, &f);
    return rc ? rc : get_attribute(pi, attrib, f);
}

SIM_API CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    struct sim_func *f;
    CUresult rc = func_of(hfunc, &f);
    return rc ? rc : set_attribute(f, attrib, value);
}

SIM_API CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel,
                                      CUdevice dev)
{
    struct sim_func *f;
    CUresult rc = func_of(kernel, &f);
    if (rc)
        return rc;
    if (dev_phys(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    return get_attribute(pi, attrib, f);
}

SIM_API CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel,
                                      CUdevice dev)
{
    struct sim_func *f;
    CUresult rc = func_of(kernel, &f);
    if (rc)
        return rc;
    if (dev_phys(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    return set_attribute(f, attrib, val);
}

static CUresult set_cache_config(const void *h, CUfunc_cache config)
{
    struct sim_func *f;
    CUresult rc = func_of(h, &f);
    if (rc)
        return rc;
    if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    f->cache_config = (int)config;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    return set_cache_config(hfunc, config);
}

SIM_API CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
    if (INITED() && dev_phys(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    return set_cache_config(kernel, config);
}

SIM_API CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
    struct sim_func *f;
    CUresult rc = func_of(hfunc, &f);
    if (rc)
        return rc;
    if (!hmod)
        return CUDA_ERROR_INVALID_VALUE;
    if (f->mod->library)
        return CUDA_ERROR_INVALID_HANDLE; /* a kernel of a library has no module */
    *hmod = (CUmodule)f->mod;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
    struct sim_func *f;
    CUresult rc = func_of(kernel, &f);
    if (rc)
        return rc;
    if (!pLib)
        return CUDA_ERROR_INVALID_VALUE;
    if (!f->mod->library)
        return CUDA_ERROR_INVALID_HANDLE;
    *pLib = (CUlibrary)f->mod;
    return CUDA_SUCCESS;
}

/* Loading is never deferred: every function is loaded. */
SIM_API CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function)
{
    struct sim_func *f;
    CUresult rc = func_of(function, &f);
    if (rc)
        return rc;
    if (!state)
        return CUDA_ERROR_INVALID_VALUE;
    *state = CU_FUNCTION_LOADING_STATE_LOADED;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuFuncLoad(CUfunction function)
{
    struct sim_func *f;
    return func_of(function, &f);
}

/* ------------------------------------------------------------------------ */
/* Occupancy                                                                 */

/* Blocks of `block` threads with `smem` dynamic shared bytes that fit on one
 * multiprocessor at once. */
static int blocks_per_sm(int block, size_t smem)
{
    int warps = (block + 31) / 32;
    int by_threads = SM_THREADS / (warps * 32);
    int by_regs = SM_REGS / (warps * 32 * REGS_PER_THREAD);
    size_t per_block = smem + SM_SMEM_RESERVED;
    int by_smem = (int)(SM_SMEM / per_block);
    int n = SM_BLOCKS;
    if (by_threads < n)
        n = by_threads;
    if (by_regs < n)
        n = by_regs;
    if (by_smem < n)
        n = by_smem;
    return n;
}

static CUresult max_active_blocks(int *numBlocks, CUfunction func, int blockSize,
                                  size_t dynamicSMemSize, unsigned flags)
{
    struct sim_func *f;
    CUresult rc = func_of(func, &f);
    if (rc)
        return rc;
    if (!numBlocks || blockSize <= 0 || flags > CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)
        return CUDA_ERROR_INVALID_VALUE;
    *numBlocks = blockSize > 1024 || dynamicSMemSize > (size_t)f->max_dyn_smem
                     ? 0
                     : blocks_per_sm(blockSize, dynamicSMemSize);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
                                                             int blockSize,
                                                             size_t dynamicSMemSize)
{
    return max_active_blocks(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

SIM_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks,
                                                                      CUfunction func,
                                                                      int blockSize,
                                                                      size_t dynamicSMemSize,
                                                                      unsigned int flags)
{
    return max_active_blocks(numBlocks, func, blockSize, dynamicSMemSize, flags);
}

/* The block size with the most threads resident per multiprocessor (the
 * largest such size on a tie), and the grid that fills the device with it. */
static CUresult max_potential(int *minGridSize, int *blockSize, CUfunction func,
                              CUoccupancyB2DSize b2d, size_t dynamicSMemSize, int limit,
                              unsigned flags)
{
    struct sim_func *f;
    CUresult rc = func_of(func, &f);
    if (rc)
        return rc;
    if (!minGridSize || !blockSize || limit < 0 || flags > CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)
        return CUDA_ERROR_INVALID_VALUE;
    int top = limit && limit < 1024 ? limit : 1024;
    int best = 0, best_blocks = 0, best_threads = 0;
    for (int b = top; b > 0; b = b == top && b % 32 ? b / 32 * 32 : b - 32) {
        size_t smem = b2d ? b2d(b) : dynamicSMemSize;
        if (smem > (size_t)f->max_dyn_smem)
            continue;
        int n = blocks_per_sm(b, smem);
        if (n * b > best_threads) {
            best = b;
            best_blocks = n;
            best_threads = n * b;
        }
    }
    *blockSize = best;
    *minGridSize = best_blocks * SM_COUNT;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize,
                                                  CUfunction func,
                                                  CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                  size_t dynamicSMemSize, int blockSizeLimit)
{
    return max_potential(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                         dynamicSMemSize, blockSizeLimit, 0);
}

SIM_API CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(
    int *minGridSize, int *blockSize, CUfunction func,
    CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize, int blockSizeLimit,
    unsigned int flags)
{
    return max_potential(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                         dynamicSMemSize, blockSizeLimit, flags);
}

SIM_API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize,
                                                         CUfunction func, int numBlocks,
                                                         int blockSize)
{
    struct sim_func *f;
    CUresult rc = func_of(func, &f);
    if (rc)
        return rc;
    if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0 || blockSize > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (blocks_per_sm(blockSize, 0) < numBlocks) {
        *dynamicSmemSize = 0;
        return CUDA_SUCCESS;
    }
    size_t avail = SM_SMEM / (size_t)numBlocks - SM_SMEM_RESERVED;
    *dynamicSmemSize = avail < (size_t)f->max_dyn_smem ? avail : (size_t)f->max_dyn_smem;
    return CUDA_SUCCESS;
}

/* The SMs of each GPC (graphics processing cluster) of an H100 SXM5: 132 in 8 GPCs of
 * 7 to 9 TPCs (2 SMs each); the layout varies from chip to chip, this is one. */
static const int gpc_sms[] = {18, 18, 18, 16, 16, 16, 16, 14};

/* Thread-block clusters: 8 blocks portably, 16 when the function allows
 * non-portable sizes (compute capability 9.0). */
static unsigned config_cluster(const CUlaunchConfig *config)
{
    for (unsigned i = 0; i < config->numAttrs; i++)
        if (config->attrs && config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
            const CUlaunchAttributeValue *v = &config->attrs[i].value;
            return v->clusterDim.x * v->clusterDim.y * v->clusterDim.z;
        }
    return 1;
}

SIM_API CUresult cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func,
                                                    const CUlaunchConfig *config)
{
    struct sim_func *f;
    CUresult rc = func_of(func, &f);
    if (rc)
        return rc;
    if (!clusterSize || !config)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned block = config->blockDimX * config->blockDimY * config->blockDimZ;
    if (!block || block > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    *clusterSize = f->non_portable_cluster ? 16 : 8;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func,
                                              const CUlaunchConfig *config)
{
    struct sim_func *f;
    CUresult rc = func_of(func, &f);
    if (rc)
        return rc;
    if (!numClusters || !config)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned block = config->blockDimX * config->blockDimY * config->blockDimZ;
    unsigned cluster = config_cluster(config);
    if (!block || block > 1024 || !cluster || cluster > (f->non_portable_cluster ? 16u : 8u))
        return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    if (config->sharedMemBytes > (unsigned)f->max_dyn_smem) {
        *numClusters = 0;
        return CUDA_SUCCESS;
    }
    /* A cluster runs within one GPC: each holds what its SMs hold, in whole clusters. */
    int per_sm = blocks_per_sm((int)block, config->sharedMemBytes);
    *numClusters = 0;
    for (size_t g = 0; g < sizeof gpc_sms / sizeof gpc_sms[0]; g++)
        *numClusters += gpc_sms[g] * per_sm / (int)cluster;
    return CUDA_SUCCESS;
}
