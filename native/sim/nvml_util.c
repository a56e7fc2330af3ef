/* The simulated NVML (libnvidia-ml.so.1): utilization from the kernel
 * timeline in the CGPU_SIM_STATE file (without one, every device is idle),
 * as coarse as the real driver's.
 *
 * The driver samples on a fixed period (CGPU_SIM_UTIL_PERIOD_NS, default
 * 1/6 s; periods tile CLOCK_REALTIME, so every caller sees the same ones).  A
 * sample describes a period that has ended: nothing about the current period
 * is visible, and a period is published once the timeline's 10 ms bucket that
 * its end cuts is complete (up to 10 ms after the end), so a sample never
 * changes once seen.  Values are whole percent.  Per process:
 *  - a raw sample is (pid, end of the period, busy %) for each live process
 *    with kernel time in that period; the device keeps the newest
 *    SIM_UTIL_BUFFER raw samples, at most 10 s back;
 *  - where several processes ran in one period, the period is attributed to
 *    one of them, as a real H100 does (seen 2026-11-25, driver 580.159.04:
 *    two time-sliced processes, each period's samples name one process with
 *    the whole device's busy %, the other none): the one whose kernel held the
 *    GPU at a sampling instant, drawn from the period (every caller draws the
 *    same) with each process's chance its share of the busy time.
 *    CGPU_SIM_UTIL_ATTRIBUTION=exact gives each its own busy % instead;
 *  - nvmlDeviceGetProcessUtilization returns one entry per process with raw
 *    samples newer than lastSeenTimeStamp: timeStamp = its newest sample's,
 *    smUtil = the mean of those samples (so a late reader gets an average
 *    over the periods the process ran, not over wall time);
 *    NVML_ERROR_NOT_FOUND when there are none; a NULL array or a count too
 *    small gives NVML_ERROR_INSUFFICIENT_SIZE and the count needed.
 * Per device:
 *  - nvmlDeviceGetUtilizationRates: gpu = busy % of the last completed
 *    period, memory = half of it;
 *  - nvmlDeviceGetSamples(NVML_GPU_UTILIZATION_SAMPLES): one sample per
 *    completed period newer than lastSeenTimeStamp (0 included). */
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

typedef struct {
    unsigned long long timeStamp;
    unsigned long long value; /* nvmlValue_t: a union of 8 bytes */
} sim_sample;

#define PROCS_UTIL_INFO_V1 (unsigned)(sizeof(sim_procs_util_info) | 1u << 24)
#define MAX_PROCS 1024
#define SIM_UTIL_BUFFER 1024          /* raw per-process samples a device keeps */
#define GPU_UTILIZATION_SAMPLES 1     /* nvmlSamplingType_t */
#define MEMORY_UTILIZATION_SAMPLES 2
#define VALUE_TYPE_UNSIGNED_INT 1     /* nvmlValueType_t */

/* The period grid: period k covers CLOCK_REALTIME [k P, (k+1) P) ns; its
 * samples carry the end, in µs.  `off` maps realtime to the timeline's
 * CLOCK_MONOTONIC. */
struct grid {
    unsigned long long p;             /* period, ns */
    unsigned long long newest;        /* the last completed period */
    unsigned long long oldest;        /* the oldest one still readable */
    long long off;                    /* realtime - monotonic, ns */
};

/* Bring every device's schedule up to `mono`: the intervals each process ran are
 * in the buckets only once the schedule has advanced past them (sim_timeline.c). */
static void advance_all(unsigned long long mono)
{
    if (!nvs.st)
        return;
    for (int i = 0; i < nvs.cfg.ndev && i < SIM_MAX_DEVICES; i++) {
        if (nvs.sdev[i] < 0)
            continue;
        struct sim_sched s = {.f = nvs.st->f, .d = &nvs.st->f->dev[nvs.sdev[i]], .sdev = nvs.sdev[i],
                              .slice = nvs.cfg.slice_ns, .sw = nvs.cfg.switch_ns,
                              .alive = sim_pid_alive};
        sim_sched_lock(&s);
        sim_sched_advance(&s, mono);
        sim_sched_unlock(&s);
    }
}

static struct grid grid_now(void)
{
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    unsigned long long mono = sim_now_ns();
    advance_all(mono);
    unsigned long long real = (unsigned long long)rt.tv_sec * 1000000000ULL + (unsigned long long)rt.tv_nsec;
    struct grid g = {.p = nvs.cfg.util_period_ns, .off = (long long)(real - mono)};
    g.newest = real / g.p - 1;
    /* A period is published once the 10 ms bucket its end cuts is complete: read earlier,
     * that bucket's share of the period would still grow, and a sample must not change
     * once seen (so a sample appears up to 10 ms after its period ends). */
    unsigned long long end_mono = (g.newest + 1) * g.p - (unsigned long long)g.off;
    if ((end_mono + SIM_TL_BUCKET_NS - 1) / SIM_TL_BUCKET_NS * SIM_TL_BUCKET_NS > mono && g.newest)
        g.newest--;
    unsigned long long back = (SIM_TL_HISTORY - 1) * SIM_TL_BUCKET_NS / g.p; /* 10 s */
    g.oldest = g.newest > back ? g.newest - back : 0;
    return g;
}

static unsigned long long period_end_us(const struct grid *g, unsigned long long k)
{
    return (k + 1) * g->p / 1000ULL;
}

/* Busy ns of `tl` in monotonic [a, b): whole buckets, and a bucket cut by an
 * end in proportion (the timeline keeps 10 ms buckets). */
static unsigned long long tl_busy_ns(const struct sim_tl *tl, unsigned long long a, unsigned long long b)
{
    const unsigned long long B = SIM_TL_BUCKET_NS;
    if (b <= a)
        return 0;
    unsigned long long ba = a / B, bb = (b - 1) / B;
    if (ba == bb)
        return sim_tl_busy(tl, ba, ba + 1) * (b - a) / B;
    unsigned long long t = sim_tl_busy(tl, ba, ba + 1) * ((ba + 1) * B - a) / B;
    t += sim_tl_busy(tl, ba + 1, bb);
    t += sim_tl_busy(tl, bb, bb + 1) * (b - bb * B) / B;
    return t;
}

/* Busy whole percent of `tl` in period k. */
static unsigned period_pct(const struct grid *g, const struct sim_tl *tl, unsigned long long k, unsigned long long *busy)
{
    unsigned long long a = k * g->p - (unsigned long long)g->off;
    unsigned long long ns = tl_busy_ns(tl, a, a + g->p);
    if (busy)
        *busy = ns;
    unsigned long long pct = (ns * 100 + g->p / 2) / g->p;
    return pct > 100 ? 100 : (unsigned)pct;
}

SIM_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    NEED_DEV(device, i);
    if (!utilization)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned gpu = 0;
    if (nvs.st && nvs.sdev[i] >= 0) {
        struct grid g = grid_now();
        gpu = period_pct(&g, &nvs.st->f->dev[nvs.sdev[i]].tl, g.newest, NULL);
    }
    utilization->gpu = gpu;
    utilization->memory = gpu / 2;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, unsigned int type, unsigned long long lastSeenTimeStamp,
                                          unsigned int *sampleValType, unsigned int *sampleCount, sim_sample *samples)
{
    NEED_DEV(device, i);
    if (!sampleValType || !sampleCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (type != GPU_UTILIZATION_SAMPLES && type != MEMORY_UTILIZATION_SAMPLES)
        return NVML_ERROR_NOT_SUPPORTED;
    struct grid g = grid_now();
    unsigned long long first = g.oldest;
    while (first <= g.newest && period_end_us(&g, first) <= lastSeenTimeStamp)
        first++;
    unsigned n = first <= g.newest ? (unsigned)(g.newest - first + 1) : 0;
    *sampleValType = VALUE_TYPE_UNSIGNED_INT;
    if (!n)
        return NVML_ERROR_NOT_FOUND;
    if (!samples) { /* the size to allocate */
        *sampleCount = n;
        return NVML_SUCCESS;
    }
    if (*sampleCount < n) /* the newest that fit */
        first = g.newest - *sampleCount + 1, n = *sampleCount;
    for (unsigned k = 0; k < n; k++) {
        unsigned pct = 0;
        if (nvs.st && nvs.sdev[i] >= 0)
            pct = period_pct(&g, &nvs.st->f->dev[nvs.sdev[i]].tl, first + k, NULL);
        samples[k].timeStamp = period_end_us(&g, first + k);
        samples[k].value = type == GPU_UTILIZATION_SAMPLES ? pct : pct / 2;
    }
    *sampleCount = n;
    return NVML_SUCCESS;
}

struct proc_util {
    unsigned pid;
    unsigned util;
    unsigned long long ts;
};

/* One entry per live process with raw samples on device i newer than
 * `last_seen` (µs), from the newest SIM_UTIL_BUFFER raw samples. */
static int proc_util(int i, unsigned long long last_seen, struct proc_util *out)
{
    if (!nvs.st || nvs.sdev[i] < 0)
        return 0;
    struct sim_state_file *f = nvs.st->f;
    int sdev = nvs.sdev[i];
    struct grid g = grid_now();
    static __thread const struct sim_tl *tls[MAX_PROCS];
    static __thread unsigned long long sum[MAX_PROCS], cnt[MAX_PROCS];
    int n = 0;
    unsigned hw = atomic_load(&f->high_water);
    for (unsigned k = 0; k < hw && k < SIM_STATE_SLOTS && n < MAX_PROCS; k++) {
        struct sim_state_slot *s = &f->slots[k];
        int pid = atomic_load(&s->pid);
        const struct sim_tl *tl = pid ? sim_slot_tl(s, sdev, 0) : NULL;
        if (!tl || !sim_pid_alive(pid, atomic_load(&s->start_time)))
            continue;
        tls[n] = tl;
        out[n] = (struct proc_util){.pid = (unsigned)pid};
        sum[n] = cnt[n] = 0;
        n++;
    }
    /* Newest period first, until the buffer's capacity is used. */
    static __thread unsigned long long busy_of[MAX_PROCS];
    static __thread unsigned pct_of[MAX_PROCS];
    const struct sim_tl *dev_tl = &f->dev[sdev].tl;
    unsigned raw = 0;
    for (unsigned long long k = g.newest + 1; k-- > g.oldest && raw < SIM_UTIL_BUFFER;) {
        unsigned long long ts = period_end_us(&g, k);
        if (ts <= last_seen)
            break;
        unsigned long long total = 0;
        int busy_n = 0;
        for (int p = 0; p < n; p++) {
            pct_of[p] = period_pct(&g, tls[p], k, &busy_of[p]);
            total += busy_of[p];
            busy_n += busy_of[p] != 0;
        }
        int winner = -1;
        if (!nvs.cfg.util_exact && busy_n > 1) {
            /* One sampling instant's owner: drawn by the period's number and the device. */
            unsigned long long x = (k + 1) * 0x9E3779B97F4A7C15ULL ^ (unsigned long long)(sdev + 1) * 0xD1B54A32D192ED03ULL;
            x ^= x >> 31;
            x *= 0xBF58476D1CE4E5B9ULL;
            x ^= x >> 29;
            unsigned long long pick = x % total;
            for (int p = 0; p < n && winner < 0; p++) {
                if (pick < busy_of[p])
                    winner = p;
                else
                    pick -= busy_of[p];
            }
        }
        for (int p = 0; p < n && raw < SIM_UTIL_BUFFER; p++) {
            if (!busy_of[p] || (winner >= 0 && p != winner))
                continue;
            raw++;
            sum[p] += winner >= 0 ? period_pct(&g, dev_tl, k, NULL) : pct_of[p];
            if (!cnt[p]++)
                out[p].ts = ts;
        }
    }
    int m = 0;
    for (int p = 0; p < n; p++)
        if (cnt[p])
            out[m++] = (struct proc_util){.pid = out[p].pid, .ts = out[p].ts,
                                          .util = (unsigned)((sum[p] * 2 + cnt[p]) / (2 * cnt[p]))};
    return m;
}

SIM_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                     sim_proc_util_sample *utilization,
                                                     unsigned int *processSamplesCount,
                                                     unsigned long long lastSeenTimeStamp)
{
    NEED_DEV(device, i);
    if (!processSamplesCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    static __thread struct proc_util procs[MAX_PROCS];
    int n = proc_util(i, lastSeenTimeStamp, procs);
    if (!n)
        return NVML_ERROR_NOT_FOUND;
    if (!utilization || *processSamplesCount < (unsigned)n) {
        *processSamplesCount = (unsigned)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (int k = 0; k < n; k++)
        utilization[k] = (sim_proc_util_sample){.pid = procs[k].pid, .timeStamp = procs[k].ts,
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
    static __thread struct proc_util procs[MAX_PROCS];
    int n = proc_util(i, info->lastSeenTimeStamp, procs);
    if (!info->procUtilArray || info->processSamplesCount < (unsigned)n) {
        info->processSamplesCount = (unsigned)n;
        return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_ERROR_NOT_FOUND;
    }
    if (!n)
        return NVML_ERROR_NOT_FOUND;
    for (int k = 0; k < n; k++)
        info->procUtilArray[k] = (sim_proc_util_info){.timeStamp = procs[k].ts, .pid = procs[k].pid,
                                                      .smUtil = procs[k].util};
    info->processSamplesCount = (unsigned)n;
    return NVML_SUCCESS;
}

/* Test oracle (not an NVML function): exact kernel ns of process `pid` on
 * device `index` in CLOCK_REALTIME [since_us, until_us), from the timeline's
 * 10 ms buckets (a bucket cut by an end counts in proportion; at most 10 s
 * back).  0 for an unknown process.  Used by the compute limit's tests and
 * benchmark to judge shares independently of NVML's coarse samples. */
SIM_API unsigned long long cgpuSimProcessBusyNs(unsigned int index, unsigned int pid,
                                                unsigned long long since_us, unsigned long long until_us)
{
    if (!__atomic_load_n(&nvs.refcount, __ATOMIC_ACQUIRE) || index >= (unsigned)nvs.cfg.ndev || !nvs.st ||
        nvs.sdev[index] < 0 || until_us <= since_us)
        return 0;
    struct sim_state_file *f = nvs.st->f;
    struct grid g = grid_now();
    unsigned long long a = since_us * 1000ULL - (unsigned long long)g.off;
    unsigned long long b = until_us * 1000ULL - (unsigned long long)g.off;
    unsigned hw = atomic_load(&f->high_water);
    unsigned long long total = 0;
    for (unsigned k = 0; k < hw && k < SIM_STATE_SLOTS; k++) {
        struct sim_state_slot *s = &f->slots[k];
        if ((unsigned)atomic_load(&s->pid) != pid)
            continue;
        const struct sim_tl *tl = sim_slot_tl(s, nvs.sdev[index], 0);
        if (tl)
            total += tl_busy_ns(tl, a, b);
    }
    return total;
}
