/* The simulated NVML (libnvidia-ml.so.1): private header shared by the
 * nvml_*.c files.  One global, `nvs`, holds the configuration read at
 * nvmlInit, the optional CGPU_SIM_STATE mapping and the device handles. */
#ifndef CGPU_NVML_SIM_H
#define CGPU_NVML_SIM_H

#pragma GCC visibility push(default)
#include "cgpu_nvml.h"
#pragma GCC visibility pop

#include "sim_common.h"

#define NVML_NO_MIG 0xFFFFFFFFu
#define SUPPORTED_EVENTS                                                                   \
    (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypePState | \
     nvmlEventTypeXidCriticalError | nvmlEventTypeClock)

struct nvmlDevice_st {
    unsigned int magic;
    int index;
};

#define DEV_MAGIC 0x6e766d6cu

struct nvml_sim {
    pthread_mutex_t mu;
    int refcount;                                /* nvmlInit count */
    struct sim_config cfg;
    struct sim_state *st;
    int sdev[SIM_MAX_DEVICES];
    struct nvmlDevice_st devs[SIM_MAX_DEVICES];
};

extern struct nvml_sim nvs;

#define NVML_NEED_INIT()                                                \
    do {                                                           \
        if (!__atomic_load_n(&nvs.refcount, __ATOMIC_ACQUIRE))     \
            return NVML_ERROR_UNINITIALIZED;                       \
    } while (0)

/* The index of a device handle, or -1. */
int dev_index(nvmlDevice_t d);

#define NEED_DEV(d, i)                            \
    NVML_NEED_INIT();                                  \
    int i = dev_index(d);                         \
    if (i < 0)                                    \
        return NVML_ERROR_INVALID_ARGUMENT

/* The processes of device i on the compute list (compute != 0), or on the
 * graphics or MPS lists (always empty), from the state file.  Returns the count. */
#define NVML_SIM_MAX_PROCS 256
int nvml_sim_procs(int i, int compute, struct sim_proc_usage procs[NVML_SIM_MAX_PROCS]);

/* The name NVML gives a process: argv[0], else its comm, else "". */
void nvml_sim_proc_name(int pid, char *out, size_t len);

#endif
