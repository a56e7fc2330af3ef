/* The simulated NVML: libnvidia-ml.so.1.  Initialisation, system and device
 * queries, memory and running processes.
 *
 * Devices come from the same CGPU_SIM_* variables as the simulated libcuda.
 * Memory in use by CUDA processes is visible only through CGPU_SIM_STATE (the
 * two libraries share nothing else); XID events are read from the file named
 * by CGPU_SIM_FAULTS (nvml_events.c). */
#include "nvml_sim.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

struct nvml_sim nvs = {.mu = PTHREAD_MUTEX_INITIALIZER};

int dev_index(nvmlDevice_t d)
{
    if (d < &nvs.devs[0] || d >= &nvs.devs[SIM_MAX_DEVICES])
        return -1;
    if (d->magic != DEV_MAGIC || d->index >= nvs.cfg.ndev)
        return -1;
    return d->index;
}

/* What an unmodelled NVML function returns (nvml_stubs.c). */
int nvml_sim_unmodelled(const char *name)
{
    const char *trace = getenv(CGPU_ENV_SIM_TRACE);
    if (trace && *trace && strcmp(trace, "0") != 0)
        fprintf(stderr, "cgpu-sim: %s: not modelled\n", name);
    if (!__atomic_load_n(&nvs.refcount, __ATOMIC_ACQUIRE))
        return NVML_ERROR_UNINITIALIZED;
    return NVML_ERROR_NOT_SUPPORTED;
}

SIM_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    if (flags & ~(unsigned)(NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH))
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&nvs.mu);
    if (nvs.refcount > 0) {
        nvs.refcount++;
        pthread_mutex_unlock(&nvs.mu);
        return NVML_SUCCESS;
    }
    struct sim_config cfg;
    if (sim_config_load(&cfg)) {
        pthread_mutex_unlock(&nvs.mu);
        return NVML_ERROR_UNKNOWN;
    }
    struct sim_state *st = NULL;
    if (cfg.state[0]) {
        st = sim_state_open(cfg.state);
        if (!st) {
            pthread_mutex_unlock(&nvs.mu);
            return NVML_ERROR_UNKNOWN;
        }
    }
    nvs.cfg = cfg;
    nvs.st = st;
    for (int i = 0; i < SIM_MAX_DEVICES; i++) {
        nvs.devs[i].magic = DEV_MAGIC;
        nvs.devs[i].index = i;
        nvs.sdev[i] = st && i < cfg.ndev ? sim_state_device(st, cfg.uuid[i]) : -1;
    }
    __atomic_store_n(&nvs.refcount, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&nvs.mu);
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
    pthread_mutex_lock(&nvs.mu);
    if (nvs.refcount == 0) {
        pthread_mutex_unlock(&nvs.mu);
        return NVML_ERROR_UNINITIALIZED;
    }
    __atomic_store_n(&nvs.refcount, nvs.refcount - 1, __ATOMIC_RELEASE);
    /* The state mapping is kept: other threads may still be reading it. */
    pthread_mutex_unlock(&nvs.mu);
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
    NVML_NEED_INIT();
    return copy_str(version, length, nvs.cfg.driver_release);
}

SIM_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    NVML_NEED_INIT();
    /* "<CUDA major>.<release>", as NVML numbers itself: 12.535.261.03. */
    char buf[48];
    snprintf(buf, sizeof buf, "%d.%s", nvs.cfg.driver_version / 1000, nvs.cfg.driver_release);
    return copy_str(version, length, buf);
}

SIM_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    NVML_NEED_INIT();
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = nvs.cfg.driver_version;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* argv[0] of the process, else its comm, else "". */
void nvml_sim_proc_name(int pid, char *out, size_t len)
{
    char path[64];
    out[0] = 0;
    snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, out, len - 1);
        close(fd);
        out[n > 0 ? n : 0] = 0;
    }
    if (out[0])
        return;
    snprintf(path, sizeof path, "/proc/%d/comm", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, out, len - 1);
    close(fd);
    out[n > 0 ? n : 0] = 0;
    out[strcspn(out, "\n")] = 0;
}

SIM_API nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    NVML_NEED_INIT();
    if (!name || !length)
        return NVML_ERROR_INVALID_ARGUMENT;
    char buf[4096];
    nvml_sim_proc_name((int)pid, buf, sizeof buf);
    if (!buf[0])
        return NVML_ERROR_NOT_FOUND;
    snprintf(name, length, "%s", buf);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    NVML_NEED_INIT();
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned)nvs.cfg.ndev;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    NVML_NEED_INIT();
    if (!device || index >= (unsigned)nvs.cfg.ndev)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &nvs.devs[index];
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    NVML_NEED_INIT();
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < nvs.cfg.ndev; i++)
        if (!strcasecmp(nvs.cfg.uuid[i], uuid)) {
            *device = &nvs.devs[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    NVML_NEED_INIT();
    unsigned d, b, s;
    if (!pciBusId || !device || sim_parse_busid(pciBusId, &d, &b, &s))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < nvs.cfg.ndev; i++)
        if (d == 0 && s == 0 && b == SIM_PCI_BUS(i)) {
            *device = &nvs.devs[i];
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
    return copy_str(uuid, length, nvs.cfg.uuid[i]);
}

SIM_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    NEED_DEV(device, i);
    return copy_str(name, length, nvs.cfg.name);
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
    unsigned long long used = nvs.cfg.other_used[i];
    if (nvs.st && nvs.sdev[i] >= 0)
        used += sim_state_used(nvs.st, nvs.sdev[i]);
    return used > nvs.cfg.memory[i] ? nvs.cfg.memory[i] : used;
}

SIM_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    NEED_DEV(device, i);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long used = used_bytes(i);
    memory->total = nvs.cfg.memory[i];
    memory->used = used;
    memory->free = nvs.cfg.memory[i] - used;
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
    memory->total = nvs.cfg.memory[i];
    memory->reserved = 0;
    memory->used = used;
    memory->free = nvs.cfg.memory[i] - used;
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

int nvml_sim_procs(int i, int compute, struct sim_proc_usage procs[NVML_SIM_MAX_PROCS])
{
    int n = 0;
    if (compute && nvs.st && nvs.sdev[i] >= 0)
        n = sim_state_procs(nvs.st, nvs.sdev[i], procs, NVML_SIM_MAX_PROCS);
    return n > NVML_SIM_MAX_PROCS ? NVML_SIM_MAX_PROCS : n;
}

/* version 1: nvmlProcessInfo_v1_t, else nvmlProcessInfo_v2_t.  Only the compute
 * list has entries: the simulator runs no graphics clients and no MPS server. */
static nvmlReturn_t running(nvmlDevice_t device, unsigned int *infoCount, void *infos, int version,
                            int compute)
{
    NEED_DEV(device, i);
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct sim_proc_usage procs[NVML_SIM_MAX_PROCS];
    int n = nvml_sim_procs(i, compute, procs);
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

/* A data-centre Hopper reports NVML_BRAND_NVIDIA (14). */
SIM_API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, int *type)
{
    NEED_DEV(device, i);
    if (!type)
        return NVML_ERROR_INVALID_ARGUMENT;
    *type = 14;
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
