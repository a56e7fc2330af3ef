/* The simulated NVML: libnvidia-ml.so.1.
 *
 * Devices come from the same CGPU_SIM_* variables as the simulated libcuda.
 * Memory in use by CUDA processes is visible only through CGPU_SIM_STATE (the
 * two libraries share nothing else); XID events are read from the file named
 * by CGPU_SIM_FAULTS. */
#pragma GCC visibility push(default)
#include "cgpu_nvml.h"
#pragma GCC visibility pop

#include "sim_common.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NVML_NO_MIG 0xFFFFFFFFu
#define SUPPORTED_EVENTS                                                                   \
    (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypePState | \
     nvmlEventTypeXidCriticalError | nvmlEventTypeClock)

struct nvmlDevice_st {
    unsigned int magic;
    int index;
};

#define DEV_MAGIC 0x6e766d6cu

static struct {
    pthread_mutex_t mu;
    int refcount;
    struct sim_config cfg;
    struct sim_state *st;
    int sdev[SIM_MAX_DEVICES];
    struct nvmlDevice_st devs[SIM_MAX_DEVICES];
} N = {.mu = PTHREAD_MUTEX_INITIALIZER};

#define NEED_INIT()                                    \
    do {                                               \
        if (!__atomic_load_n(&N.refcount, __ATOMIC_ACQUIRE)) \
            return NVML_ERROR_UNINITIALIZED;           \
    } while (0)

static int dev_index(nvmlDevice_t d)
{
    if (d < &N.devs[0] || d >= &N.devs[SIM_MAX_DEVICES])
        return -1;
    if (d->magic != DEV_MAGIC || d->index >= N.cfg.ndev)
        return -1;
    return d->index;
}

#define NEED_DEV(d, i)                            \
    NEED_INIT();                                  \
    int i = dev_index(d);                         \
    if (i < 0)                                    \
        return NVML_ERROR_INVALID_ARGUMENT

/* What an unmodelled NVML function returns (nvml_stubs.c). */
int nvml_sim_unmodelled(const char *name)
{
    (void)name;
    if (!__atomic_load_n(&N.refcount, __ATOMIC_ACQUIRE))
        return NVML_ERROR_UNINITIALIZED;
    return NVML_ERROR_NOT_SUPPORTED;
}

SIM_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    if (flags & ~(unsigned)(NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH))
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&N.mu);
    if (N.refcount > 0) {
        N.refcount++;
        pthread_mutex_unlock(&N.mu);
        return NVML_SUCCESS;
    }
    struct sim_config cfg;
    if (sim_config_load(&cfg)) {
        pthread_mutex_unlock(&N.mu);
        return NVML_ERROR_UNKNOWN;
    }
    struct sim_state *st = NULL;
    if (cfg.state[0]) {
        st = sim_state_open(cfg.state);
        if (!st) {
            pthread_mutex_unlock(&N.mu);
            return NVML_ERROR_UNKNOWN;
        }
    }
    N.cfg = cfg;
    N.st = st;
    for (int i = 0; i < SIM_MAX_DEVICES; i++) {
        N.devs[i].magic = DEV_MAGIC;
        N.devs[i].index = i;
        N.sdev[i] = st && i < cfg.ndev ? sim_state_device(st, cfg.uuid[i]) : -1;
    }
    __atomic_store_n(&N.refcount, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&N.mu);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

SIM_API nvmlReturn_t nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

SIM_API nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&N.mu);
    if (N.refcount == 0) {
        pthread_mutex_unlock(&N.mu);
        return NVML_ERROR_UNINITIALIZED;
    }
    __atomic_store_n(&N.refcount, N.refcount - 1, __ATOMIC_RELEASE);
    /* The state mapping is kept: other threads may still be reading it. */
    pthread_mutex_unlock(&N.mu);
    return NVML_SUCCESS;
}

SIM_API const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_ENABLED:
        return "The requested vgpu operation is not available on target device, because ECC is enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Ran out of critical resources, other than memory";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "The requested frequency is not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "The provided version is invalid/unsupported";
    case NVML_ERROR_DEPRECATED: return "The requested functionality has been deprecated";
    case NVML_ERROR_NOT_READY: return "The system is not ready for the request";
    case NVML_ERROR_GPU_NOT_FOUND: return "The GPU is not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t copy_str(char *dst, unsigned int length, const char *src)
{
    if (!dst)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    NEED_INIT();
    return copy_str(version, length, "580.00.00-sim");
}

SIM_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    NEED_INIT();
    return copy_str(version, length, "13.580.00-sim");
}

SIM_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    NEED_INIT();
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = N.cfg.driver_version;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

SIM_API nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    NEED_INIT();
    if (!name || !length)
        return NVML_ERROR_INVALID_ARGUMENT;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%u/comm", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NVML_ERROR_NOT_FOUND;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return NVML_ERROR_NOT_FOUND;
    buf[n] = 0;
    buf[strcspn(buf, "\n")] = 0;
    snprintf(name, length, "%s", buf);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    NEED_INIT();
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned)N.cfg.ndev;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    NEED_INIT();
    if (!device || index >= (unsigned)N.cfg.ndev)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &N.devs[index];
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    NEED_INIT();
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < N.cfg.ndev; i++)
        if (!strcasecmp(N.cfg.uuid[i], uuid)) {
            *device = &N.devs[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    NEED_INIT();
    unsigned d, b, s;
    if (!pciBusId || !device || sim_parse_busid(pciBusId, &d, &b, &s))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < N.cfg.ndev; i++)
        if (d == 0 && s == 0 && b == SIM_PCI_BUS(i)) {
            *device = &N.devs[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

SIM_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    NEED_DEV(device, i);
    return copy_str(uuid, length, N.cfg.uuid[i]);
}

SIM_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    NEED_DEV(device, i);
    return copy_str(name, length, N.cfg.name);
}

SIM_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    NEED_DEV(device, i);
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)i;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    NEED_DEV(device, i);
    if (!minorNumber)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minorNumber = (unsigned)i;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    NEED_DEV(device, i);
    char buf[32];
    snprintf(buf, sizeof buf, "1650023%06d", i);
    return copy_str(serial, length, buf);
}

/* Used bytes: other tenants plus every live CUDA process of the state file. */
static unsigned long long used_bytes(int i)
{
    unsigned long long used = N.cfg.other_used[i];
    if (N.st && N.sdev[i] >= 0)
        used += sim_state_used(N.st, N.sdev[i]);
    return used > N.cfg.memory[i] ? N.cfg.memory[i] : used;
}

SIM_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    NEED_DEV(device, i);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long used = used_bytes(i);
    memory->total = N.cfg.memory[i];
    memory->used = used;
    memory->free = N.cfg.memory[i] - used;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    NEED_DEV(device, i);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long used = used_bytes(i);
    memory->total = N.cfg.memory[i];
    memory->reserved = 0;
    memory->used = used;
    memory->free = N.cfg.memory[i] - used;
    return NVML_SUCCESS;
}

static void fill_legacy_pci(int i, nvmlPciInfo_v1_t *pci)
{
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%04X:%02X:%02X.0", 0u, SIM_PCI_BUS(i), 0u);
    pci->domain = 0;
    pci->bus = SIM_PCI_BUS(i);
    pci->device = 0;
    pci->pciDeviceId = SIM_PCI_DEVICE_ID;
    pci->pciSubSystemId = SIM_PCI_SUBSYS_ID;
}

SIM_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_v1_t *pci)
{
    NEED_DEV(device, i);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    fill_legacy_pci(i, pci);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_v1_t *pci)
{
    return nvmlDeviceGetPciInfo(device, pci);
}

SIM_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    NEED_DEV(device, i);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", 0u, SIM_PCI_BUS(i), 0u);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", 0u, SIM_PCI_BUS(i), 0u);
    pci->domain = 0;
    pci->bus = SIM_PCI_BUS(i);
    pci->device = 0;
    pci->pciDeviceId = SIM_PCI_DEVICE_ID;
    pci->pciSubSystemId = SIM_PCI_SUBSYS_ID;
    return NVML_SUCCESS;
}

/* version 1: nvmlProcessInfo_v1_t, else nvmlProcessInfo_v2_t.  Only the compute
 * list has entries: the simulator runs no graphics clients and no MPS server. */
static nvmlReturn_t running(nvmlDevice_t device, unsigned int *infoCount, void *infos, int version,
                            int compute)
{
    NEED_DEV(device, i);
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct sim_proc_usage procs[256];
    int n = 0;
    if (compute && N.st && N.sdev[i] >= 0)
        n = sim_state_procs(N.st, N.sdev[i], procs, 256);
    if (n > 256)
        n = 256;
    if (*infoCount < (unsigned)n) {
        *infoCount = (unsigned)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n && !infos)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int k = 0; k < n; k++) {
        if (version == 1) {
            nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)infos + k;
            p->pid = (unsigned)procs[k].pid;
            p->usedGpuMemory = procs[k].used;
        } else {
            nvmlProcessInfo_v2_t *p = (nvmlProcessInfo_v2_t *)infos + k;
            p->pid = (unsigned)procs[k].pid;
            p->usedGpuMemory = procs[k].used;
            p->gpuInstanceId = NVML_NO_MIG;
            p->computeInstanceId = NVML_NO_MIG;
        }
    }
    *infoCount = (unsigned)n;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                          nvmlProcessInfo_v1_t *infos)
{ return running(device, infoCount, infos, 1, 1); }
SIM_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                             nvmlProcessInfo_v2_t *infos)
{ return running(device, infoCount, infos, 2, 1); }
SIM_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                             nvmlProcessInfo_t *infos)
{ return running(device, infoCount, infos, 3, 1); }
SIM_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                           nvmlProcessInfo_v1_t *infos)
{ return running(device, infoCount, infos, 1, 0); }
SIM_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvmlProcessInfo_v2_t *infos)
{ return running(device, infoCount, infos, 2, 0); }
SIM_API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvmlProcessInfo_t *infos)
{ return running(device, infoCount, infos, 3, 0); }

SIM_API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                             nvmlProcessInfo_v1_t *infos)
{ return running(device, infoCount, infos, 1, 0); }
SIM_API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                                nvmlProcessInfo_v2_t *infos)
{ return running(device, infoCount, infos, 2, 0); }
SIM_API nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                nvmlProcessInfo_t *infos)
{ return running(device, infoCount, infos, 3, 0); }

SIM_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    NEED_DEV(device, i);
    if (!utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    /* Busy while any process holds memory on it. */
    int busy = used_bytes(i) > N.cfg.other_used[i];
    utilization->gpu = busy ? 100 : 0;
    utilization->memory = busy ? 50 : 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                              unsigned int *temp)
{
    NEED_DEV(device, i);
    if (!temp || sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    *temp = 40;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    NEED_DEV(device, i);
    if (!power)
        return NVML_ERROR_INVALID_ARGUMENT;
    *power = 75000; /* milliwatts */
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    NEED_DEV(device, i);
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = 9;
    *minor = 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch)
{
    NEED_DEV(device, i);
    if (!arch)
        return NVML_ERROR_INVALID_ARGUMENT;
    *arch = NVML_DEVICE_ARCH_HOPPER;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                          unsigned int *pendingMode)
{
    NEED_DEV(device, i);
    if (!currentMode || !pendingMode)
        return NVML_ERROR_INVALID_ARGUMENT;
    *currentMode = 0;
    *pendingMode = 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    NEED_DEV(device, i);
    if (!isMigDevice)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = 0;
    return NVML_SUCCESS;
}

/* ---- Events: XIDs from CGPU_SIM_FAULTS --------------------------------- */

struct pending {
    int dev;
    unsigned long long xid;
};

struct nvmlEventSet_st {
    unsigned int magic;
    pthread_mutex_t mu;
    unsigned long long types[SIM_MAX_DEVICES];   /* registered event types */
    long long reg_off[SIM_MAX_DEVICES];          /* file offset at registration */
    long long cursor;                            /* how far the file has been read */
    struct pending *queue;
    size_t nq, capq;
};

#define SET_MAGIC 0x65767365u

static long long faults_size(void)
{
    struct stat sb;
    if (!N.cfg.faults[0] || stat(N.cfg.faults, &sb) != 0)
        return 0;
    return (long long)sb.st_size;
}

static int valid_set(nvmlEventSet_t set)
{
    return set && set->magic == SET_MAGIC;
}

SIM_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    NEED_DEV(device, i);
    if (!eventTypes)
        return NVML_ERROR_INVALID_ARGUMENT;
    *eventTypes = SUPPORTED_EVENTS;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    NEED_INIT();
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlEventSet_st *s = calloc(1, sizeof *s);
    if (!s)
        return NVML_ERROR_MEMORY;
    s->magic = SET_MAGIC;
    pthread_mutex_init(&s->mu, NULL);
    s->cursor = faults_size();
    *set = s;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                              nvmlEventSet_t set)
{
    NEED_DEV(device, i);
    if (!valid_set(set))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (eventTypes & ~(unsigned long long)SUPPORTED_EVENTS)
        return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&set->mu);
    if (!set->types[i])
        set->reg_off[i] = faults_size();
    set->types[i] |= eventTypes;
    pthread_mutex_unlock(&set->mu);
    return NVML_SUCCESS;
}

/* "<uuid-or-index> <xid>": the device index, or -1. */
static int parse_fault(char *line, unsigned long long *xid)
{
    char *save = NULL;
    char *who = strtok_r(line, " \t\r", &save);
    char *what = strtok_r(NULL, " \t\r", &save);
    if (!who || !what || *who == '#')
        return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(what, &end, 10);
    if (errno || *end || !isdigit((unsigned char)*what))
        return -1;
    *xid = x;
    if (isdigit((unsigned char)*who)) {
        long idx = strtol(who, &end, 10);
        return *end || idx < 0 || idx >= N.cfg.ndev ? -1 : (int)idx;
    }
    for (int i = 0; i < N.cfg.ndev; i++)
        if (!strcasecmp(N.cfg.uuid[i], who))
            return i;
    return -1;
}

/* Read complete new lines of the faults file into the queue.  set->mu held. */
static void poll_faults(nvmlEventSet_t set)
{
    if (!N.cfg.faults[0])
        return;
    int fd = open(N.cfg.faults, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return;
    }
    if (sb.st_size < set->cursor) /* truncated or replaced: start over */
        set->cursor = 0;
    while (set->cursor < sb.st_size) {
        char buf[65536];
        ssize_t n = pread(fd, buf, sizeof buf - 1, set->cursor);
        if (n <= 0)
            break;
        buf[n] = 0;
        char *p = buf, *nl;
        while ((nl = memchr(p, '\n', (size_t)(buf + n - p)))) {
            long long line_off = set->cursor + (p - buf);
            *nl = 0;
            unsigned long long xid;
            int dev = parse_fault(p, &xid);
            if (dev >= 0 && (set->types[dev] & nvmlEventTypeXidCriticalError) &&
                line_off >= set->reg_off[dev]) {
                if (set->nq == set->capq) {
                    size_t ncap = set->capq ? set->capq * 2 : 16;
                    struct pending *nqp = realloc(set->queue, ncap * sizeof *nqp);
                    if (nqp) {
                        set->queue = nqp;
                        set->capq = ncap;
                    }
                }
                if (set->nq < set->capq)
                    set->queue[set->nq++] = (struct pending){dev, xid};
            }
            p = nl + 1;
        }
        if (p == buf) {
            if ((size_t)n < sizeof buf - 1)
                break; /* an incomplete last line: wait for the rest */
            p = buf + n; /* a line longer than the buffer: skip it */
        }
        set->cursor += p - buf;
        if (p < buf + n)
            break; /* an incomplete last line: wait for the rest */
    }
    close(fd);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static nvmlReturn_t event_wait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms,
                               int v2)
{
    NEED_INIT();
    if (!valid_set(set) || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    long long deadline = now_ms() + timeoutms;
    for (;;) {
        pthread_mutex_lock(&set->mu);
        if (!set->nq)
            poll_faults(set);
        if (set->nq) {
            struct pending ev = set->queue[0];
            memmove(&set->queue[0], &set->queue[1], (set->nq - 1) * sizeof *set->queue);
            set->nq--;
            pthread_mutex_unlock(&set->mu);
            data->device = &N.devs[ev.dev];
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = ev.xid;
            if (v2) {
                data->gpuInstanceId = NVML_NO_MIG;
                data->computeInstanceId = NVML_NO_MIG;
            }
            return NVML_SUCCESS;
        }
        pthread_mutex_unlock(&set->mu);
        long long left = deadline - now_ms();
        if (left <= 0)
            return NVML_ERROR_TIMEOUT;
        struct timespec ts = {0, (left < 10 ? left : 10) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

SIM_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return event_wait(set, data, timeoutms, 1);
}

SIM_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return event_wait(set, data, timeoutms, 0);
}

SIM_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    NEED_INIT();
    if (!valid_set(set))
        return NVML_ERROR_INVALID_ARGUMENT;
    set->magic = 0;
    pthread_mutex_destroy(&set->mu);
    free(set->queue);
    free(set);
    return NVML_SUCCESS;
}
