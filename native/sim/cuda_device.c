/* The simulated CUDA driver (libcuda.so.1).  Initialisation (cuInit, CUDA_VISIBLE_DEVICES, fork) and device queries. */
#include "cuda_sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <pthread.h>
#include <signal.h>

/* ------------------------------------------------------------------------ */
/* Initialisation                                                            */

static void reset_after_fork(void)
{
    /* The child starts with no driver state, as if CUDA had never been
     * initialised in it (the parent's structures are simply dropped). */
    unsigned gen = drv.gen;
    memset(&drv, 0, sizeof drv);
    pthread_mutex_init(&drv.mu, NULL);
    drv.gen = gen + 1;
    drv.slot = -1;
}

/* A process that exits gives its memory back at once, as on a real GPU
 * (readers would also skip the dead pid, but not across pid namespaces). */
__attribute__((destructor)) static void release_at_exit(void)
{
    if (!drv.st || drv.slot < 0 || drv.st->self_pid != getpid())
        return;
    struct sim_state_slot *s = &drv.st->f->slots[drv.slot];
    for (int d = 0; d < SIM_STATE_DEVICES; d++) {
        atomic_store(&s->used[d], 0);
        atomic_store(&s->contexts[d], 0);
    }
    atomic_store(&s->pid, 0);
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static int forked_child; /* this process is a fork of one that used the driver */

static void after_fork_child(void)
{
    forked_child = 1;
    reset_after_fork();
}

static void install_atfork(void)
{
    pthread_atfork(NULL, NULL, after_fork_child);
}

/* CUDA_VISIBLE_DEVICES, as the driver reads it: indices or UUID prefixes,
 * the list ending at the first entry that names no device. */
static void visible_devices(void)
{
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    for (int i = 0; i < SIM_MAX_DEVICES; i++)
        drv.ord[i] = -1;
    drv.nvis = 0;
    if (!env) {
        for (int i = 0; i < drv.cfg.ndev; i++) {
            drv.vis[drv.nvis] = i;
            drv.ord[i] = drv.nvis++;
        }
        return;
    }
    const char *p = env;
    while (*p && drv.nvis < drv.cfg.ndev) {
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
            if (*end || v < 0 || v >= drv.cfg.ndev)
                break;
            phys = (int)v;
        } else if (!strncasecmp(tok, "GPU-", 4)) {
            int matches = 0;
            for (int i = 0; i < drv.cfg.ndev; i++)
                if (!strncasecmp(drv.cfg.uuid[i], tok, strlen(tok))) {
                    phys = i;
                    matches++;
                }
            if (matches != 1)
                break;
        } else {
            break;
        }
        if (drv.ord[phys] >= 0)
            break;
        drv.vis[drv.nvis] = phys;
        drv.ord[phys] = drv.nvis++;
        p += len;
        if (*p == ',')
            p++;
    }
}

/* The driver's own thread.  NVIDIA's driver starts threads of its own in every process that
 * uses it (its event handler among them), so no CUDA process is single-threaded, and glibc's
 * single-thread shortcuts never apply to it.  Without one here a simulated process was kinder
 * than a real one: a launch took 50 ns alone and 70-77 ns beside a second thread, and a shim
 * thread (the compute gate's) was charged that difference.  This one waits for nothing. */
static void *driver_thread(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* the process's signals are its own threads' */
    for (;;)
        pause();
    return NULL;
}

static void start_driver_thread(void)
{
    /* Not in a fork of a process that used the driver: the thread would be one started after
     * a multi-threaded fork, which ThreadSanitizer refuses (the shim's tests run under it). */
    if (forked_child)
        return;
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    if (pthread_create(&t, &attr, driver_thread, NULL) == 0)
        pthread_setname_np(t, "cgpu-sim-evt");
    pthread_attr_destroy(&attr);
}

SIM_API CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&atfork_once, install_atfork);
    LOCK();
    if (drv.init_done) {
        CUresult rc = drv.init_rc;
        UNLOCK();
        return rc;
    }
    drv.init_done = 1;
    CUresult rc = CUDA_SUCCESS;
    if (sim_config_load(&drv.cfg)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    visible_devices();
    if (!drv.nvis) {
        rc = CUDA_ERROR_NO_DEVICE;
        goto out;
    }
    for (int i = 0; i < SIM_MAX_DEVICES; i++)
        drv.sdev[i] = -1;
    drv.slot = -1;
    if (drv.cfg.state[0]) {
        drv.st = sim_state_open(drv.cfg.state);
        if (!drv.st) {
            rc = CUDA_ERROR_INVALID_VALUE;
            goto out;
        }
        for (int i = 0; i < drv.cfg.ndev; i++)
            drv.sdev[i] = sim_state_device(drv.st, drv.cfg.uuid[i]);
        drv.slot = sim_state_claim(drv.st);
        if (drv.slot < 0) {
            fprintf(stderr, "cgpu-sim: " CGPU_ENV_SIM_STATE ": %s: no free process slot\n", drv.cfg.state);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
    }
    timeline_init();
    if (backing_init()) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    atomic_store_explicit(&drv.inited, 1, memory_order_release);
    start_driver_thread();
out:
    drv.init_rc = rc;
    UNLOCK();
    return rc;
}

SIM_API CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    if (INITED()) {
        *driverVersion = drv.cfg.driver_version;
        return CUDA_SUCCESS;
    }
    int v = 13000;
    const char *e = getenv(CGPU_ENV_SIM_DRIVER_VERSION);
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
/* Devices                                                                   */

int dev_phys(CUdevice d)
{
    return d >= 0 && d < drv.nvis ? drv.vis[d] : -1;
}

SIM_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    NEED_INIT();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= drv.nvis)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetCount(int *count)
{
    NEED_INIT();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = drv.nvis;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    NEED_INIT();
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev_phys(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", drv.cfg.name);
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
    memcpy(uuid->bytes, drv.cfg.uuid_bytes[phys], 16);
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
    *bytes = drv.cfg.memory[phys];
    return CUDA_SUCCESS;
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
    /* The product, as NVML's PCI ids say (an H100 SXM5): cuBLAS picks its kernels by it. */
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID: return (int)SIM_PCI_DEVICE_ID;
    case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID: return (int)SIM_PCI_SUBSYS_ID;
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
    for (int i = 0; i < drv.nvis; i++)
        if (d == 0 && s == 0 && b == SIM_PCI_BUS(drv.vis[i])) {
            *dev = i;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_DEVICE;
}
