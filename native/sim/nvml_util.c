/* The simulated NVML (libnvidia-ml.so.1): utilization from the kernel
 * timeline in the CGPU_SIM_STATE file (without one, every device is idle).
 * Only whole 10 ms buckets that have ended are read:
 *  - nvmlDeviceGetUtilizationRates: gpu = busy share of the last 1 s (100
 *    buckets), memory = half of it;
 *  - nvmlDeviceGetProcessUtilization / nvmlDeviceGetProcessesUtilizationInfo:
 *    one sample per live process with kernel time in the window from
 *    lastSeenTimeStamp (at most 10 s back) to now; smUtil = its busy share of
 *    that window; timeStamp = the window's end, in µs since the epoch. */
#include "nvml_sim.h"

#include <time.h>

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} sim_proc_util_sample;

typedef struct {
    unsigned long long timeStamp;
    unsigned int pid;
    unsigned int smUtil, memUtil, encUtil, decUtil, jpgUtil, ofaUtil;
} sim_proc_util_info;

typedef struct {
    unsigned int version;
    unsigned int processSamplesCount;
    unsigned long long lastSeenTimeStamp;
    sim_proc_util_info *procUtilArray;
} sim_procs_util_info;

#define PROCS_UTIL_INFO_V1 (unsigned)(sizeof(sim_procs_util_info) | 1u << 24)
#define MAX_SAMPLES 1024

static unsigned pct(unsigned long long busy, unsigned long long window)
{
    unsigned long long p = window ? (busy * 100 + window / 2) / window : 0;
    return p > 100 ? 100 : (unsigned)p;
}

SIM_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    NEED_DEV(device, i);
    if (!utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long busy = 0, b1 = sim_now_ns() / SIM_TL_BUCKET_NS;
    if (nvs.st && nvs.sdev[i] >= 0)
        busy = sim_tl_busy(&nvs.st->f->dev[nvs.sdev[i]].tl, b1 - 100, b1);
    utilization->gpu = pct(busy, 100 * SIM_TL_BUCKET_NS);
    utilization->memory = utilization->gpu / 2;
    return NVML_SUCCESS;
}

struct proc_busy {
    unsigned pid;
    unsigned util;
};

/* Live processes with kernel time on device i in the window from `last_seen`
 * (µs since the epoch) to now; *end_us: the window's end. */
static int proc_busy(int i, unsigned long long last_seen, struct proc_busy *out,
                     unsigned long long *end_us)
{
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    unsigned long long mono = sim_now_ns();
    unsigned long long real = (unsigned long long)rt.tv_sec * 1000000000ULL + (unsigned long long)rt.tv_nsec;
    unsigned long long b1 = mono / SIM_TL_BUCKET_NS, b0 = b1 - SIM_TL_HISTORY;
    unsigned long long seen_mono = last_seen * 1000ULL + mono > real ? last_seen * 1000ULL + mono - real : 0;
    /* The nearest bucket boundary: a timeStamp handed back starts where it ended. */
    unsigned long long seen_b = (seen_mono + SIM_TL_BUCKET_NS / 2) / SIM_TL_BUCKET_NS;
    if (seen_b > b0)
        b0 = seen_b;
    *end_us = (b1 * SIM_TL_BUCKET_NS + real - mono) / 1000ULL;
    if (!nvs.st || nvs.sdev[i] < 0 || b0 >= b1)
        return 0;
    struct sim_state_file *f = nvs.st->f;
    int n = 0, sdev = nvs.sdev[i];
    unsigned hw = atomic_load(&f->high_water);
    for (unsigned k = 0; k < hw && k < SIM_STATE_SLOTS && n < MAX_SAMPLES; k++) {
        struct sim_state_slot *s = &f->slots[k];
        int pid = atomic_load(&s->pid);
        struct sim_tl *tl = pid ? sim_slot_tl(s, sdev, 0) : NULL;
        if (!tl)
            continue;
        unsigned long long busy = sim_tl_busy(tl, b0, b1);
        if (!busy || !sim_pid_alive(pid, atomic_load(&s->start_time)))
            continue;
        out[n].pid = (unsigned)pid;
        out[n].util = pct(busy, (b1 - b0) * SIM_TL_BUCKET_NS);
        n++;
    }
    return n;
}

SIM_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                     sim_proc_util_sample *utilization,
                                                     unsigned int *processSamplesCount,
                                                     unsigned long long lastSeenTimeStamp)
{
    NEED_DEV(device, i);
    if (!processSamplesCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    static __thread struct proc_busy procs[MAX_SAMPLES];
    unsigned long long end_us;
    int n = proc_busy(i, lastSeenTimeStamp, procs, &end_us);
    if (!n)
        return NVML_ERROR_NOT_FOUND;
    if (!utilization || *processSamplesCount < (unsigned)n) {
        *processSamplesCount = (unsigned)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int k = 0; k < n; k++)
        utilization[k] = (sim_proc_util_sample){.pid = procs[k].pid, .timeStamp = end_us,
                                                .smUtil = procs[k].util};
    *processSamplesCount = (unsigned)n;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device,
                                                           sim_procs_util_info *info)
{
    NEED_DEV(device, i);
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != PROCS_UTIL_INFO_V1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    static __thread struct proc_busy procs[MAX_SAMPLES];
    unsigned long long end_us;
    int n = proc_busy(i, info->lastSeenTimeStamp, procs, &end_us);
    if (!info->procUtilArray || info->processSamplesCount < (unsigned)n) {
        info->processSamplesCount = (unsigned)n;
        return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_ERROR_NOT_FOUND;
    }
    for (int k = 0; k < n; k++)
        info->procUtilArray[k] = (sim_proc_util_info){.timeStamp = end_us, .pid = procs[k].pid,
                                                      .smUtil = procs[k].util};
    info->processSamplesCount = (unsigned)n;
    return NVML_SUCCESS;
}
