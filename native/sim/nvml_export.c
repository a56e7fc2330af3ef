/* The simulated NVML (libnvidia-ml.so.1): nvmlInternalGetExportTable, NVML's
 * private interface, which NVIDIA's nvidia-smi fetches before anything else
 * ("Mismatch in versions between nvidia-smi and NVML" when it fails).
 *
 * A table is an array of pointers: entry 0 is the table's size in bytes, every
 * other entry (a slot) a function.  One table id is answered, the one
 * nvidia-smi of the 535 and 580 branches asks for, and only while the release
 * the simulator reports (CGPU_SIM_DRIVER_RELEASE) is of one of those branches:
 * the slots of other branches are not known.  The slots were found by giving
 * every slot a function of its own that logs its calls (nvidia-smi 535.261.03;
 * NVIDIA's k8s-test-infra mock NVML documents the same slots for 580.65.06):
 *
 *   26   NVML's debug log, printf-like: nvidia-smi hands it every line it prints
 *        ("nvidia-smi %s: %s\n", "stdout", line) after checking that the size in
 *        entry 0 covers the slot.  The simulator keeps no debug log.
 *   81   handle of a device by index: (unsigned index, nvmlDevice_t *out, flags)
 *   213  compute processes   (nvmlDevice_t, unsigned *count, struct export_proc *)
 *   214  graphics processes  (same)
 *   215  MPS processes       (same)
 *
 * Every other slot logs `cgpu-sim: nvmlInternalGetExportTable slot N: not
 * modelled` under CGPU_SIM_TRACE and returns NVML_ERROR_NOT_SUPPORTED, which
 * nvidia-smi shows as N/A. */
#include "nvml_sim.h"

#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT_SLOTS 256

/* 6c3efec4-8fc9-4e6c-a327-ee696e12f7c4, in memory (first three fields little-endian). */
static const unsigned char smi_table_id[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                                               0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};

/* The release branches whose table the slots above describe. */
static const char *const known_branches[] = {"535", "580"};

/* One entry of a process list: the numbers of nvmlProcessDetail_v1_t, then the
 * process name inline. */
struct export_proc {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
    char name[4096];
};
_Static_assert(sizeof(struct export_proc) == 4128, "process entry layout");

static int tracing(void)
{
    const char *t = getenv(CGPU_ENV_SIM_TRACE);
    return t && *t && strcmp(t, "0") != 0;
}

static int slot_debug_log(const char *format, ...)
{
    (void)format;
    return 0;
}

static nvmlReturn_t slot_device_by_index(unsigned int index, nvmlDevice_t *device, unsigned int flags)
{
    (void)flags;
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* A process list, by the rules of nvmlDeviceGet*RunningProcesses: a count too
 * small gets NVML_ERROR_INSUFFICIENT_SIZE and the count needed. */
static nvmlReturn_t processes(nvmlDevice_t device, unsigned int *count, struct export_proc *out,
                              int compute)
{
    NEED_DEV(device, i);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct sim_proc_usage procs[NVML_SIM_MAX_PROCS];
    int n = nvml_sim_procs(i, compute, procs);
    if (*count < (unsigned)n) {
        *count = (unsigned)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n && !out)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int k = 0; k < n; k++) {
        struct export_proc *p = &out[k];
        memset(p, 0, offsetof(struct export_proc, name));
        p->pid = (unsigned)procs[k].pid;
        p->usedGpuMemory = procs[k].used;
        p->gpuInstanceId = NVML_NO_MIG;
        p->computeInstanceId = NVML_NO_MIG;
        nvml_sim_proc_name(procs[k].pid, p->name, sizeof p->name);
    }
    *count = (unsigned)n;
    return NVML_SUCCESS;
}

static nvmlReturn_t slot_compute(nvmlDevice_t d, unsigned int *count, struct export_proc *out)
{
    return processes(d, count, out, 1);
}

static nvmlReturn_t slot_graphics(nvmlDevice_t d, unsigned int *count, struct export_proc *out)
{
    return processes(d, count, out, 0);
}

static nvmlReturn_t slot_mps(nvmlDevice_t d, unsigned int *count, struct export_proc *out)
{
    return processes(d, count, out, 0);
}

/* Every other slot: a function of its own, so that a trace names the slot. */
static nvmlReturn_t unmodelled(unsigned int slot)
{
    if (tracing())
        fprintf(stderr, "cgpu-sim: nvmlInternalGetExportTable slot %u: not modelled\n", slot);
    if (!__atomic_load_n(&nvs.refcount, __ATOMIC_ACQUIRE))
        return NVML_ERROR_UNINITIALIZED;
    return NVML_ERROR_NOT_SUPPORTED;
}

#define SLOT(n) \
    static nvmlReturn_t slot_##n(void) { return unmodelled(n); }
#define SLOTS16(h)                                                                            \
    SLOT(h##0) SLOT(h##1) SLOT(h##2) SLOT(h##3) SLOT(h##4) SLOT(h##5) SLOT(h##6) SLOT(h##7) \
    SLOT(h##8) SLOT(h##9) SLOT(h##a) SLOT(h##b) SLOT(h##c) SLOT(h##d) SLOT(h##e) SLOT(h##f)
#define ADDR(n) [n] = (void *)slot_##n,
#define ADDRS16(h)                                                                            \
    ADDR(h##0) ADDR(h##1) ADDR(h##2) ADDR(h##3) ADDR(h##4) ADDR(h##5) ADDR(h##6) ADDR(h##7) \
    ADDR(h##8) ADDR(h##9) ADDR(h##a) ADDR(h##b) ADDR(h##c) ADDR(h##d) ADDR(h##e) ADDR(h##f)
#define ALL16(M)                                                                          \
    M(0x0) M(0x1) M(0x2) M(0x3) M(0x4) M(0x5) M(0x6) M(0x7) M(0x8) M(0x9) M(0xa) M(0xb) \
    M(0xc) M(0xd) M(0xe) M(0xf)

ALL16(SLOTS16)

static void *smi_table[EXPORT_SLOTS] = {ALL16(ADDRS16)};
static pthread_once_t smi_table_once = PTHREAD_ONCE_INIT;

static void smi_table_fill(void)
{
    smi_table[0] = (void *)(sizeof(void *) * EXPORT_SLOTS);
    smi_table[26] = (void *)slot_debug_log;
    smi_table[81] = (void *)slot_device_by_index;
    smi_table[213] = (void *)slot_compute;
    smi_table[214] = (void *)slot_graphics;
    smi_table[215] = (void *)slot_mps;
}

static int branch_known(const char *release)
{
    for (size_t k = 0; k < sizeof known_branches / sizeof known_branches[0]; k++)
        if (!strncmp(release, known_branches[k], 3) && release[3] == '.')
            return 1;
    return 0;
}

SIM_API nvmlReturn_t nvmlInternalGetExportTable(const void **ppExportTable, const unsigned char *id)
{
    if (!ppExportTable || !id)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (tracing())
        fprintf(stderr,
                "cgpu-sim: nvmlInternalGetExportTable "
                "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n",
                id[3], id[2], id[1], id[0], id[5], id[4], id[7], id[6], id[8], id[9], id[10], id[11],
                id[12], id[13], id[14], id[15]);
    NVML_NEED_INIT();
    if (memcmp(id, smi_table_id, sizeof smi_table_id))
        return NVML_ERROR_NOT_SUPPORTED;
    if (!branch_known(nvs.cfg.driver_release)) {
        if (tracing())
            fprintf(stderr, "cgpu-sim: nvmlInternalGetExportTable: the table of release %s is not modelled "
                            "(only the 535 and 580 branches)\n", nvs.cfg.driver_release);
        return NVML_ERROR_NOT_SUPPORTED;
    }
    pthread_once(&smi_table_once, smi_table_fill);
    *ppExportTable = smi_table;
    return NVML_SUCCESS;
}
