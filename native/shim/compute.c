/* The compute limit's controller and the launch gate's slow path (see compute.h).
 *
 * Every process with a compute limit runs one thread.  The thread that holds the container's
 * controller lock (an OFD lock on one byte of the ledger, so it passes to another process when
 * its holder dies) ticks every TICK_NS:
 *   1. it measures the GPU time of the container's processes (the pids of the ledger's live slots)
 *      and of everyone else on the device, from NVML's per-process utilization: the driver's own
 *      accounting of each process's kernel time, which other tenants' work does not inflate;
 *   2. it moves the budget: credit += rate x window - used, kept within [-DEBT_MAX, BURST];
 *      rate is the limit (fixed), or under `share` the limit raised to what the others leave
 *      idle less HEADROOM;
 *   3. it refills the tickets: (credit - work admitted but not measured yet) / cost per launch,
 *      so queued work never runs ahead of the budget by more than about one tick.
 * The budget is kept in the controller's memory: the file's copy is for readers.  The tickets
 * word is the container's to take from; a container that writes it escapes its limit as code that
 * never calls the shim does (docs/architecture.md, "Compute share"). */
#include "compute.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define TICK_NS 10000000LL           /* 10 ms */
#define BURST_NS 20000000LL          /* credit saved up at most */
#define DEBT_MAX_NS 2000000000LL     /* debt carried at most */
#define COST_MIN_NS 100LL            /* estimated GPU time per launch: bounds */
#define COST_MAX_NS 1000000000LL
#define COST_START_NS 100000LL
#define HEADROOM_PCT 5               /* `share`: idle time left for others to claim theirs */
#define STALE_NS 250000000ULL        /* a controller silent this long is stopped or stuck */
#define PENDING_MAX_US 40000ULL      /* NVML's lag at most: admitted earlier means measured */
#define HISTORY 64                   /* ticks of (time, launches) kept to tell measured launches */
#define CONTROLLER_BYTE (CGPU_ADMIN_BYTE - 1)
#define MAX_SAMPLES 1024

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} proc_util_sample;

typedef nvmlReturn_t (*proc_util_fn)(nvmlDevice_t, proc_util_sample *, unsigned int *, unsigned long long);
typedef nvmlReturn_t (*by_uuid_fn)(const char *, nvmlDevice_t *);
typedef nvmlReturn_t (*util_fn)(nvmlDevice_t, nvmlUtilization_t *);

/* The controller's private state for one ledger device. */
struct dev_ctl {
    nvmlDevice_t nvml;
    unsigned long long seen_us;      /* end of the last measured window (NVML timestamps) */
    unsigned long long hist_us[HISTORY];
    uint64_t hist_launches[HISTORY];
    unsigned hist_n;
    uint64_t measured_launches;      /* launches counter at the end of the measured window */
    uint64_t last_tick;              /* CLOCK_MONOTONIC ns of the last tick */
    double others;                   /* others' share, smoothed */
    double busy_sum, launch_sum;     /* decaying sums for the cost per launch */
    long long probe;                 /* launches admitted per tick while their cost is unknown */
    int known;                       /* a cost per launch has been measured */
    long long credit;                /* GPU ns the container may still use (negative: debt) */
    long long cost;                  /* GPU ns per launch, once known */
    double used;                     /* ours, smoothed over ~1 s, for readers */
};

static struct {
    pthread_t thread;
    int started;
    proc_util_fn proc_util;
    by_uuid_fn by_uuid;
    util_fn util;
    struct dev_ctl dev[CGPU_MAX_DEVICES];
} ctl;

static pthread_mutex_t start_mutex = PTHREAD_MUTEX_INITIALIZER;

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static unsigned long long real_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000;
}

static void sleep_ns(long long ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000LL), .tv_nsec = (long)(ns % 1000000000LL)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}


static long long clampll(long long v, long long lo, long long hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- the launch gate's slow path -------------------------------------------------- */

void compute_wait(int dev)
{
    struct ledger_compute *k = &g_shim.ledger.l->compute[dev];
    if (!__atomic_load_n(&ctl.started, __ATOMIC_ACQUIRE))
        compute_start();
    uint64_t since = mono_ns();
    for (;;) {
        uint32_t seq = __atomic_load_n(&k->seq, __ATOMIC_ACQUIRE);
        if (__atomic_fetch_sub(&k->tickets, 1, __ATOMIC_RELAXED) > 0)
            break;
        uint64_t beat = __atomic_load_n(&k->beat, __ATOMIC_RELAXED), now = mono_ns();
        if (beat > since)
            since = beat; /* the controller is alive */
        if (now - since > STALE_NS) {
            /* No controller for a while (stopped, or unable to measure): never hang; pace
             * this process alone at its limit, from the last estimated cost per launch. */
            unsigned pct = g_shim.ledger.compute[dev];
            uint64_t known = __atomic_load_n(&k->cost, __ATOMIC_RELAXED);
            long long cost = clampll(known ? (long long)known : COST_START_NS, COST_MIN_NS, COST_MAX_NS / 10);
            sleep_ns(cost * (100 - pct) / (long long)pct);
            break;
        }
        struct timespec ts = {0, 2000000}; /* a missed wake costs at most 2 ms */
        syscall(SYS_futex, &k->seq, FUTEX_WAIT, seq, &ts, NULL, 0);
    }
    __atomic_fetch_add(&k->launches, 1, __ATOMIC_RELAXED);
}

/* ---- measurement ------------------------------------------------------------------ */

/* Whether `pid` is one of the container's live processes (a ledger slot). */
static int ours(const struct ledger *l, unsigned pid)
{
    for (unsigned s = 0; s < CGPU_MAX_SLOTS; s++)
        if (__atomic_load_n(&l->slots[s].in_use, __ATOMIC_RELAXED) == 1 &&
            (unsigned)__atomic_load_n(&l->slots[s].pid, __ATOMIC_RELAXED) == pid)
            return 1;
    return 0;
}

/* GPU time (µs) of the container (*mine) and of everyone else (*theirs) over the window that
 * NVML reports from c->seen_us; returns the window in µs (0: nothing new).  A window in which no
 * process ran a kernel gives nothing: the next one covers it, as NVML's windows tile the time. */
static unsigned long long measure(struct dev_ctl *c, const struct ledger *l, double *mine, double *theirs)
{
    static proc_util_sample samples[MAX_SAMPLES];
    unsigned int n = MAX_SAMPLES;
    *mine = *theirs = 0;
    nvmlReturn_t rc = ctl.proc_util(c->nvml, samples, &n, c->seen_us);
    unsigned long long now = real_us();
    if (rc == NVML_ERROR_NOT_FOUND && now > c->seen_us + 2000000ull)
        c->seen_us = now - 1000000ull; /* idle a long while: NVML looks back only so far */
    if (rc != NVML_SUCCESS || n == 0 || n > MAX_SAMPLES)
        return 0;
    unsigned long long end = samples[0].timeStamp;
    if (end <= c->seen_us || end > now + 1000000ull)
        return 0;
    unsigned long long w = end - c->seen_us;
    for (unsigned i = 0; i < n; i++) {
        double busy = (double)(samples[i].smUtil > 100 ? 100 : samples[i].smUtil) / 100.0 * (double)w;
        if (ours(l, samples[i].pid))
            *mine += busy;
        else
            *theirs += busy;
    }
    c->seen_us = end;
    return w;
}

/* The launches counter when the clock read `at_us` (the newest tick at or before it). */
static uint64_t launches_at(const struct dev_ctl *c, unsigned long long at_us, uint64_t now_launches)
{
    uint64_t v = now_launches;
    for (unsigned i = 0; i < c->hist_n && i < HISTORY; i++) {
        unsigned j = (c->hist_n - 1 - i) % HISTORY;
        v = c->hist_launches[j];
        if (c->hist_us[j] <= at_us)
            break;
    }
    return v;
}

/* ---- one tick of the controller, for ledger device d ---------------------------------- */

static void tick(int d, uint64_t now)
{
    struct dev_ctl *c = &ctl.dev[d];
    struct ledger *l = g_shim.ledger.l;
    struct ledger_compute *k = &l->compute[d];
    unsigned pct = g_shim.ledger.compute[d];
    uint64_t launches = __atomic_load_n(&k->launches, __ATOMIC_RELAXED);
    unsigned long long now_us = real_us();
    unsigned h = c->hist_n++ % HISTORY;
    c->hist_us[h] = now_us;
    c->hist_launches[h] = launches;

    /* The budget and the cost live in the controller's memory; the file's copies are for
     * readers (writing them changes nothing). */
    long long credit = c->credit;
    long long cost = c->known ? c->cost : COST_MIN_NS;
    /* The budget grows with wall time, at the rate of this moment... */
    double rate = pct / 100.0;
    if (g_shim.ledger.policy[d] == CGPU_COMPUTE_SHARE && 1.0 - c->others - HEADROOM_PCT / 100.0 > rate)
        rate = 1.0 - c->others - HEADROOM_PCT / 100.0;
    long long dt = c->last_tick && now > c->last_tick ? (long long)(now - c->last_tick) : 0;
    c->last_tick = now;
    credit += (long long)(rate * (double)(dt > 100000000LL ? 100000000LL : dt));
    /* ... and shrinks by the GPU time measured, whenever a measurement comes. */
    double mine, theirs;
    unsigned long long w_us = measure(c, l, &mine, &theirs);
    if (w_us) {
        double w = (double)w_us, mine_ns = mine * 1000.0;
        double a = w / 1e5 > 1 ? 1 : w / 1e5; /* others: ~100 ms memory */
        c->others = c->others + a * (theirs / w - c->others);
        double b = w / 1e6 > 1 ? 1 : w / 1e6; /* ours, for readers: ~1 s */
        c->used = c->used + b * (mine / w - c->used);
        credit -= (long long)mine_ns;
        uint64_t upto = launches_at(c, c->seen_us, launches);
        /* Cost per launch: the ratio of two sums, GPU time over launches, that forget at each
         * window in which new launches were measured (GPU time trails its launches). */
        if (upto > c->measured_launches) {
            c->busy_sum *= 0.9;
            c->launch_sum = 0.9 * c->launch_sum + (double)(upto - c->measured_launches);
        }
        c->busy_sum += mine_ns;
        if ((c->launch_sum >= 1.0 && c->busy_sum > 0) || c->launch_sum >= 1024.0) {
            /* (a thousand launches measured at no visible time: as cheap as we can tell) */
            cost = clampll((long long)(c->busy_sum / c->launch_sum), COST_MIN_NS, COST_MAX_NS);
            c->known = 1;
        }
        if (upto > c->measured_launches)
            c->measured_launches = upto;
        __atomic_store_n(&k->used, (uint32_t)(c->used * 10000.0 + 0.5), __ATOMIC_RELAXED);
    }
    credit = clampll(credit, -DEBT_MAX_NS, BURST_NS);
    /* Work admitted since the measured window ended is not in `credit` yet. */
    /* (NVML is at most a few ticks late: what was admitted before that has been measured.) */
    unsigned long long horizon = PENDING_MAX_US + 3 * (unsigned long long)cost / 1000;
    uint64_t before = launches_at(c, now_us - horizon, launches);
    uint64_t seen = c->measured_launches > before ? c->measured_launches : before;
    uint64_t pending = launches > seen ? launches - seen : 0;
    long long room = credit - (long long)(pending > 1000000 ? 1000000 : pending) * cost;
    /* Until launches have been measured their cost is unknown: admit one, and twice as many
     * each time all those admitted were measured without a visible GPU time. */
    long long tickets = room <= 0 ? 0 : room / cost + 1;
    if (!c->known) {
        tickets = room > 0 && pending == 0 ? c->probe : 0;
        if (tickets && c->probe < (1 << 20))
            c->probe *= 2;
    }
    c->credit = credit;
    c->cost = cost;
    __atomic_store_n(&k->credit, credit, __ATOMIC_RELAXED);
    if (c->known)
        __atomic_store_n(&k->cost, (uint64_t)cost, __ATOMIC_RELAXED);
    __atomic_store_n(&k->tickets, tickets, __ATOMIC_RELAXED);
    __atomic_store_n(&k->beat, now, __ATOMIC_RELAXED);
    __atomic_fetch_add(&k->seq, 1, __ATOMIC_RELEASE);
    if (tickets > 0)
        syscall(SYS_futex, &k->seq, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

/* ---- the controller thread ----------------------------------------------------------- */

/* Hold the container's controller lock; 1 while this process holds it. */
static int lead(void)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = CONTROLLER_BYTE, .l_len = 1};
    return fcntl(g_shim.ledger.fd, F_OFD_SETLK, &fl) == 0;
}

static int nvml_ready(void)
{
    nvmlReturn_t (*init_fn)(void) = (nvmlReturn_t(*)(void))shim_nvml_sym("nvmlInit_v2");
    ctl.proc_util = (proc_util_fn)shim_nvml_sym("nvmlDeviceGetProcessUtilization");
    ctl.by_uuid = (by_uuid_fn)shim_nvml_sym("nvmlDeviceGetHandleByUUID");
    if (!init_fn || !ctl.proc_util || !ctl.by_uuid || init_fn() != NVML_SUCCESS)
        return 0;
    for (unsigned d = 0; d < CGPU_MAX_DEVICES; d++) {
        struct dev_ctl *c = &ctl.dev[d];
        c->seen_us = real_us() - 2 * (unsigned long long)TICK_NS / 1000;
        if (g_shim.ledger.compute[d] && ctl.by_uuid(g_shim.ledger.l->devices[d].uuid, &c->nvml) != NVML_SUCCESS)
            c->nvml = NULL; /* not measurable: its launches pace themselves (compute_wait) */
    }
    return 1;
}

static void *controller(void *arg)
{
    (void)arg;
    int leading = 0, measurable = nvml_ready();
    if (!measurable)
        fprintf(stderr, "cgpu: NVML per-process utilization is unavailable; the compute limit paces each "
                        "process alone\n");
    for (;;) {
        uint64_t start = mono_ns();
        if (!leading && measurable && lead()) {
            leading = 1;
            for (unsigned d = 0; d < CGPU_MAX_DEVICES; d++) { /* start from what is measured now */
                ctl.dev[d].hist_n = 0;
                ctl.dev[d].last_tick = 0;
                ctl.dev[d].probe = 1;
                ctl.dev[d].known = 0;
                ctl.dev[d].credit = 0;
                ctl.dev[d].busy_sum = ctl.dev[d].launch_sum = 0;
                ctl.dev[d].seen_us = real_us() - 2 * (unsigned long long)TICK_NS / 1000;
                ctl.dev[d].measured_launches = __atomic_load_n(&g_shim.ledger.l->compute[d].launches, __ATOMIC_RELAXED);
            }
        }
        if (leading)
            for (unsigned d = 0; d < g_shim.ledger.l->ndevices && d < CGPU_MAX_DEVICES; d++)
                if (g_shim.ledger.compute[d] && ctl.dev[d].nvml)
                    tick((int)d, start);
        uint64_t spent = mono_ns() - start;
        sleep_ns(spent < (uint64_t)TICK_NS ? TICK_NS - (long long)spent : 1000000);
    }
    return NULL;
}

void compute_start(void)
{
    int any = 0;
    for (unsigned d = 0; d < CGPU_MAX_DEVICES; d++)
        any |= g_shim.ledger.compute[d] != 0;
    pthread_mutex_lock(&start_mutex);
    if (any && !ctl.started && g_shim.ledger.l && g_shim.ledger.writable) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        __atomic_store_n(&ctl.started, pthread_create(&ctl.thread, &attr, controller, NULL) == 0, __ATOMIC_RELEASE);
        pthread_attr_destroy(&attr);
    }
    pthread_mutex_unlock(&start_mutex);
}

void compute_forget_process(void)
{
    pthread_mutex_init(&start_mutex, NULL);
    memset(&ctl, 0, sizeof ctl);
}
