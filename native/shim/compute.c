/* The compute limit's controller and the launch gate's slow path (see compute.h).
 *
 * Every process with a compute limit runs one thread.  The thread that holds the container's
 * controller lock (an OFD lock on one byte of the ledger, so it passes to another process when
 * its holder dies) ticks every TICK_NS.  It works with NVML as NVML is: per-process samples of
 * whole percent, each describing a sample period (about 1/6 s) that has ended, so what it learns
 * is always at least one period late.  It never assumes a bound on that lag:
 *   1. measure: the samples newer than the last one seen (lastSeenTimeStamp), split into the
 *      container's processes and everyone else's (pid placement below).  Each sample is a whole
 *      period's busy time.  The device's own samples (nvmlDeviceGetSamples) give the period,
 *      say which periods have closed even when nobody ran (the newest is the measured horizon
 *      T_m), and bound the process figures: they have fewer roundings, and cannot be inflated
 *      by an entry that averages several periods;
 *   2. budget: credit += rate x wall time - measured GPU time.  Debt is carried, so over any
 *      window the container gets rate x window, plus or minus what the next step misjudges;
 *   3. work not measured yet: the launches admitted since T_m - d (d: a launch's time from its
 *      admission to its end) times the cost per launch, which is the GPU time measured over the
 *      last ~1.5 s of closed periods divided by the launches whose work fell in them.  While
 *      few launches have been measured, the cost is bounded from above by what NVML's rounding
 *      could have hidden, so a new container never overshoots while it learns;
 *   4. refill: tickets = (credit - unmeasured work) / cost, rounded; room above BURST_NS plus
 *      one launch is not kept (an idle container saves up at most that).
 * Sharing.  Where several processes ran in a period, NVML names one of them for the whole period
 * (seen on an H100, driver 580.159.04; the simulator models it), so one period's figures are
 * all or nothing.  They are right on average, not period by period: while others have been
 * seen in the last SHARED_HOLD_US, the budget is charged the launches whose work fell in the
 * measured span at the cost per launch, and that cost is learnt over SHARED_COST_WINDOW_US.
 * rate is the limit (`fixed`), or under `share` the limit raised to what the others left idle in
 * the last closed period less HEADROOM_PCT; when the others grow by YIELD_STEP, nothing beyond
 * the limit for two periods, so a newcomer finds room at once.
 *
 * Pid placement.  NVML reports the kernel's pids as the host sees them; the ledger holds the
 * pids of the container's own namespace.  A pid counts as the container's only when the kernel
 * says so: /proc/<pid> exists, in this process's pid namespace (the ns/pid link), and either this
 * process sees its namespace nested below /proc's (NSpid has several levels: the namespace is the
 * container's, all of it) or, in /proc's own namespace, a live ledger slot has that pid and start
 * time.  A pid in another namespace is someone else's, whatever the ledger says.  A pid /proc
 * does not show (a container whose /proc hides the host's pids) cannot be placed: it counts as
 * the container's (the limit holds, neighbours count against it), until it runs in a period in
 * which the container had no work admitted at all, which proves it is someone else's (for
 * FOREIGN_US; then it must be proven again, as the pid may have been reused).
 *
 * The budget is kept in the controller's memory: the file's copy is for readers.  The tickets
 * word is the container's to take from; a container that writes it escapes its limit as code that
 * never calls the shim does (docs/architecture.md, "Compute share"). */
#include "compute.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cgpu_procstat.h"

#define TICK_NS 10000000LL           /* 10 ms */
#define BURST_NS 20000000LL          /* room saved up at most (beyond one launch's cost) */
#define DEBT_MAX_NS 2000000000LL     /* debt carried at most */
#define COST_MIN_NS 50LL             /* GPU time per launch: bounds */
#define COST_MAX_NS 10000000000LL
#define HEADROOM_PCT 5               /* `share`: idle time left for others to claim theirs */
#define YIELD_STEP 0.03             /* `share`: others growing this much make room for them */
#define STALE_NS 250000000ULL        /* a controller silent this long is stopped or stuck */
#define PERIOD_US 166667ULL          /* NVML's sample period until one is seen */
#define COST_WINDOW_US 1500000ULL    /* measured time the cost per launch is taken over */
#define SHARED_COST_WINDOW_US 10000000ULL /* the same while others run (see "Sharing" above) */
#define SHARED_HOLD_US 3000000ULL    /* others seen this recently: the GPU is shared */
#define HISTORY 2048                 /* ticks of (time, launches) kept: ~20 s */
#define MARKS 128                    /* measurement points kept: ~20 s */
#define MAX_SAMPLES 1024
#define DEV_RING 32                  /* device samples kept */
#define PLACES 256                   /* pids placed, cached */
#define PLACE_TTL_US 1000000ULL      /* a placement is checked again after this */
#define FOREIGN_US 10000000ULL       /* an unplaceable pid proven someone else's stays so this long */
#define CONTROLLER_BYTE (CGPU_ADMIN_BYTE - 1)

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} proc_util_sample;

typedef struct {
    unsigned long long timeStamp;
    unsigned long long value;
} nvml_sample;

typedef nvmlReturn_t (*proc_util_fn)(nvmlDevice_t, proc_util_sample *, unsigned int *, unsigned long long);
typedef nvmlReturn_t (*samples_fn)(nvmlDevice_t, unsigned int, unsigned long long, unsigned int *, unsigned int *,
                                   nvml_sample *);
typedef nvmlReturn_t (*by_uuid_fn)(const char *, nvmlDevice_t *);

enum { P_OTHER = 0, P_OURS = 1, P_UNKNOWN = 2 };

/* Where a pid NVML reported belongs, as last checked. */
struct place {
    unsigned pid;
    int verdict;
    unsigned long long foreign_until_us; /* unknown, but seen busy while the container had nothing
                                          * running: someone else's until then */
    unsigned long long checked_us;
};

/* A point at which measurement advanced: time measured up to, GPU time and rounding slack. */
struct mark {
    unsigned long long t_us;
    double used_ns, slack_ns;
};

/* The controller's private state for one ledger device. */
struct dev_ctl {
    nvmlDevice_t nvml;
    unsigned long long seen_us;      /* lastSeenTimeStamp for the per-process samples */
    unsigned long long polled_us;    /* when they were last asked for */
    unsigned long long dev_seen_us;  /* and for the device's samples */
    unsigned long long measured_us;  /* T_m: periods up to here are measured */
    unsigned long long period_us;    /* NVML's sample period */
    int dev_sampled, period_seen;    /* dev_seen_us is a sample's; period_us was measured */
    int entry_period;                /* period_us is from the process samples' stamps */
    unsigned long long entry_ts;     /* the newest process sample's stamp */
    unsigned long long dev_ts[DEV_RING]; /* the device's latest samples: end of period, busy % */
    unsigned dev_pct[DEV_RING];
    unsigned dev_n;
    unsigned long long hist_us[HISTORY];
    uint64_t hist_launches[HISTORY];
    unsigned hist_n;
    struct mark marks[MARKS];
    unsigned marks_n;
    double used_total, slack_total;  /* GPU ns measured, and the rounding that may hide in it */
    uint64_t last_tick;              /* CLOCK_MONOTONIC ns of the last tick */
    double others;                   /* others' share, smoothed */
    double idle;                     /* the device's idle share (its own samples), smoothed */
    double ours;                     /* ours as charged to the budget, smoothed */
    unsigned long long yield_until_us; /* `share`: nothing beyond the limit until then */
    unsigned long long shared_until_us; /* others ran lately: debit launches x cost */
    unsigned long long next_poll_us; /* when the next period should have ended */
    double used;                     /* ours, smoothed over ~1 s, for readers */
    long long credit;                /* GPU ns the container may still use (negative: debt) */
    long long cost;                  /* GPU ns per launch; 0 until measured */
};

static struct {
    pthread_t thread;
    int started;
    proc_util_fn proc_util;
    samples_fn samples;
    by_uuid_fn by_uuid;
    unsigned long long own_ns;       /* inode of this process's pid namespace */
    int nested;                      /* /proc shows this namespace nested below its own */
    struct place places[PLACES];
    struct dev_ctl dev[CGPU_MAX_DEVICES];
    FILE *trace;                     /* CGPU_COMPUTE_TRACE: one line per measurement, or NULL */
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

int compute_wait(int dev)
{
    struct ledger_compute *k = &g_shim.ledger.l->compute[dev];
    if (!__atomic_load_n(&ctl.started, __ATOMIC_ACQUIRE))
        compute_start();
    uint64_t since = mono_ns();
    for (;;) {
        int tm = __atomic_load_n(&g_token.mode, __ATOMIC_ACQUIRE);
        if (tm == TOKEN_ON) {
            int held = token_admit(dev);
            if (held != TOKEN_LEFT)
                return held;
            continue;
        }
        if (!g_shim.ledger.compute[dev] && tm == TOKEN_OFF)
            return -1; /* best effort, and no arbiter: nothing to wait for */
        uint32_t seq = __atomic_load_n(&k->seq, __ATOMIC_ACQUIRE);
        if (tm == TOKEN_OFF && __atomic_fetch_sub(&k->tickets, 1, __ATOMIC_RELAXED) > 0)
            break;
        uint64_t beat = __atomic_load_n(&k->beat, __ATOMIC_RELAXED), now = mono_ns();
        if (beat > since)
            since = beat; /* the controller is alive */
        if (now - since > STALE_NS) {
            /* No controller for a while (stopped, or unable to measure): never hang; pace
             * this process alone at its limit, from the last estimated cost per launch. */
            unsigned pct = g_shim.ledger.compute[dev];
            if (!pct)
                return -1; /* best effort: no limit to pace at */
            uint64_t known = __atomic_load_n(&k->cost, __ATOMIC_RELAXED);
            long long cost = clampll(known ? (long long)known : 100000LL, COST_MIN_NS, 100000000LL);
            sleep_ns(cost * (100 - pct) / (long long)pct);
            break;
        }
        if (tm == TOKEN_UNDECIDED) { /* the compute thread is finding out whether an arbiter runs */
            uint32_t ts = __atomic_load_n(&g_token.seq, __ATOMIC_ACQUIRE);
            if (__atomic_load_n(&g_token.mode, __ATOMIC_ACQUIRE) == TOKEN_UNDECIDED) {
                struct timespec t = {0, 2000000};
                syscall(SYS_futex, &g_token.seq, FUTEX_WAIT_PRIVATE, ts, &t, NULL, 0);
            }
            continue;
        }
        struct timespec ts = {0, 2000000}; /* a missed wake costs at most 2 ms */
        syscall(SYS_futex, &k->seq, FUTEX_WAIT, seq, &ts, NULL, 0);
    }
    __atomic_fetch_add(&k->launches, 1, __ATOMIC_RELAXED);
    return -1;
}

/* ---- pid placement ---------------------------------------------------------------- */

static unsigned long long ns_inode(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

/* Whether /proc shows this process nested below /proc's own pid namespace (NSpid: 2+ levels). */
static int nested_ns(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    if (!f)
        return 0;
    char line[256];
    int levels = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "NSpid:", 6)) {
            char *save = NULL;
            for (char *p = strtok_r(line + 6, " \t\n", &save); p; p = strtok_r(NULL, " \t\n", &save))
                levels++;
            break;
        }
    fclose(f);
    return levels >= 2;
}

static int judge(const struct ledger *l, unsigned pid)
{
    char path[64];
    char state;
    unsigned long long start;
    unsigned long flags;
    if (!cgpu_pid_stat((int)pid, &state, &flags, &start))
        return P_UNKNOWN;
    snprintf(path, sizeof path, "/proc/%u/ns/pid", pid);
    unsigned long long ns = ns_inode(path);
    if (!ns || !ctl.own_ns)
        return P_UNKNOWN;
    if (ns != ctl.own_ns)
        return P_OTHER; /* the kernel says: another pid namespace */
    if (ctl.nested)
        return P_OURS; /* our namespace, nested below /proc's: the container's, all of it */
    for (unsigned s = 0; s < CGPU_MAX_SLOTS; s++)
        if (__atomic_load_n(&l->slots[s].in_use, __ATOMIC_RELAXED) == 1 &&
            (unsigned)__atomic_load_n(&l->slots[s].pid, __ATOMIC_RELAXED) == pid &&
            __atomic_load_n(&l->slots[s].start_time, __ATOMIC_RELAXED) == start)
            return P_OURS;
    return P_OTHER;
}

/* The cached placement of `pid` (checked again after PLACE_TTL_US). */
static struct place *place_of(const struct ledger *l, unsigned pid, unsigned long long now_us)
{
    struct place *free_slot = NULL, *oldest = &ctl.places[0];
    for (unsigned i = 0; i < PLACES; i++) {
        struct place *p = &ctl.places[i];
        if (p->pid == pid) {
            if (now_us - p->checked_us > PLACE_TTL_US) {
                int v = judge(l, pid);
                if (v != p->verdict)
                    p->foreign_until_us = 0;
                p->verdict = v;
                p->checked_us = now_us;
            }
            return p;
        }
        if (!p->pid && !free_slot)
            free_slot = p;
        if (p->checked_us < oldest->checked_us)
            oldest = p;
    }
    struct place *p = free_slot ? free_slot : oldest;
    *p = (struct place){.pid = pid, .verdict = judge(l, pid), .checked_us = now_us};
    return p;
}

/* ---- measurement ------------------------------------------------------------------ */

/* The launches counter when the clock read `at_us` (the newest tick at or before it). */
static uint64_t launches_at(const struct dev_ctl *c, unsigned long long at_us, uint64_t now_launches)
{
    uint64_t v = now_launches;
    unsigned n = c->hist_n < HISTORY ? c->hist_n : HISTORY;
    for (unsigned i = 0; i < n; i++) {
        unsigned j = (c->hist_n - 1 - i) % HISTORY;
        v = c->hist_launches[j];
        if (c->hist_us[j] <= at_us)
            break;
    }
    return v;
}

/* From the device's own samples: the sample period, and the busy % by period end. */
static void device_samples(struct dev_ctl *c)
{
    if (!ctl.samples)
        return;
    nvml_sample s[16];
    unsigned type = 0, n = 16;
    if (ctl.samples(c->nvml, 1 /* NVML_GPU_UTILIZATION_SAMPLES */, c->dev_seen_us, &type, &n, s) != NVML_SUCCESS ||
        n > 16)
        return;
    for (unsigned i = 0; i < n; i++) {
        if (s[i].timeStamp <= c->dev_seen_us)
            continue;
        /* Two samples in a row (the previous one a sample, not the take-over time). */
        unsigned long long gap = s[i].timeStamp - c->dev_seen_us;
        if (c->dev_sampled && gap >= 10000 && gap < 1200000 && (!c->period_seen || gap < c->period_us * 3 / 2)) {
            c->period_us = gap;
            c->period_seen = 1;
        }
        c->dev_sampled = 1;
        unsigned slot = c->dev_n++ % DEV_RING;
        c->dev_ts[slot] = s[i].timeStamp;
        unsigned v = type == 1 /* unsigned int */ ? (unsigned)(s[i].value & 0xffffffffu) : 101;
        c->dev_pct[slot] = v;
        c->dev_seen_us = s[i].timeStamp;
    }
}

/* The device's busy ns over its samples of the periods ending in (from, to]; *count of them
 * (-1 when one is unusable). */
static double device_busy(const struct dev_ctl *c, unsigned long long from, unsigned long long to, int *count)
{
    double busy = 0;
    int n = 0;
    unsigned have = c->dev_n < DEV_RING ? c->dev_n : DEV_RING;
    for (unsigned i = 0; i < have; i++) {
        unsigned slot = (c->dev_n - 1 - i) % DEV_RING;
        if (c->dev_ts[slot] <= from || c->dev_ts[slot] > to)
            continue;
        if (c->dev_pct[slot] > 100) {
            *count = -1;
            return 0;
        }
        busy += c->dev_pct[slot] / 100.0 * (double)c->period_us * 1000.0;
        n++;
    }
    *count = n;
    return busy;
}

/* Take the per-process samples newer than c->seen_us.  *mine, *theirs: GPU ns; returns the time
 * they span (µs, 0: nothing new).  `idle`: the container had no work admitted or running over
 * the span, so any process busy in it is someone else's. */
static unsigned long long measure(struct dev_ctl *c, const struct ledger *l, int idle, double *mine, double *theirs,
                                  double *slack, double *device)
{
    static proc_util_sample samples[MAX_SAMPLES];
    unsigned int n = MAX_SAMPLES;
    *mine = *theirs = *slack = 0;
    *device = -1;
    unsigned long long asked = real_us(), polled = c->polled_us;
    nvmlReturn_t rc = ctl.proc_util(c->nvml, samples, &n, c->seen_us);
    unsigned long long now = real_us(), prev = c->seen_us, p = c->period_us;
    c->polled_us = asked;
    if (rc != NVML_SUCCESS || n == 0 || n > MAX_SAMPLES)
        return 0;
    unsigned long long newest = prev;
    int ours_n = 0, others_n = 0;
    for (unsigned i = 0; i < n; i++) {
        unsigned long long ts = samples[i].timeStamp;
        if (ts <= prev || ts > now + 1000000ull)
            continue; /* not newer than asked, or from the future: ignored */
        /* An entry averages its process's samples since prev.  Asked every tick, that is the
         * one period that ended since the last poll; more only if this thread was held up for
         * more than a period (a process idle in between has no sample there, and a sample the
         * driver published late is one period too). */
        unsigned long long periods = (ts - prev + p / 2) / p;
        unsigned long long since_poll = polled && ts > polled ? (ts - polled) / p + 1 : 1;
        if (since_poll < periods)
            periods = since_poll;
        periods = periods < 1 ? 1 : periods > 12 ? 12 : periods;
        /* (Stamps closer than half a period: the driver's windows are shorter than we think.) */
        double span_ns = (double)(ts - prev < p / 2 ? ts - prev : periods * p) * 1000.0;
        double busy = (double)(samples[i].smUtil > 100 ? 100 : samples[i].smUtil) / 100.0 * span_ns;
        struct place *pl = place_of(l, samples[i].pid, now);
        if (pl->verdict == P_UNKNOWN && idle && samples[i].smUtil > 0)
            pl->foreign_until_us = now + FOREIGN_US; /* busy while we had nothing running */
        if (pl->verdict == P_OURS || (pl->verdict == P_UNKNOWN && now >= pl->foreign_until_us)) {
            *mine += busy;
            *slack += 0.005 * span_ns;
            ours_n++;
        } else {
            *theirs += busy;
            others_n++;
        }
        if (ts > newest)
            newest = ts;
    }
    if (newest == prev)
        return 0;
    /* Without the device's samples, the period is the smallest spacing of these stamps. */
    if (!c->period_seen && c->entry_ts && newest - c->entry_ts >= 10000 && newest - c->entry_ts <= 2000000 &&
        (!c->entry_period || newest - c->entry_ts < c->period_us)) {
        c->period_us = newest - c->entry_ts;
        c->entry_period = 1;
    }
    c->entry_ts = newest;
    /* The device's own figures for the same periods, when it has them all.  Ours is what it
     * says less the others' when nobody else ran (an entry that averages several periods, some
     * idle, cannot over-count then) or when that has fewer roundings in it; and the two never
     * add up to more than the device was busy. */
    int cnt;
    unsigned long long expect = (newest - prev + p / 2) / p;
    double dev_ns = device_busy(c, prev, newest, &cnt);
    if (expect >= 1 && cnt == (int)expect) {
        *device = dev_ns;
        if (others_n == 0 || ours_n > others_n + 1) {
            double m = dev_ns - *theirs;
            *mine = m > 0 ? m : 0;
            *slack = 0.005 * (double)(others_n + 1) * (double)(expect * p) * 1000.0;
        } else if (*mine + *theirs > dev_ns) {
            double f = dev_ns / (*mine + *theirs);
            *mine *= f;
            *theirs *= f;
        }
    }
    c->seen_us = newest;
    return newest - prev;
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
    long long cost = c->cost;
    /* d: from a launch's admission to the end of its work (its kernel, and a little queue). */
    unsigned long long lag_us = 20000 + 2 * (unsigned long long)TICK_NS / 1000 + (unsigned long long)cost / 1000;

    /* The rate of this moment... */
    double rate = pct / 100.0;
    /* `share`: what the container uses and what the device leaves idle, less the headroom
     * (the others' own figures are all or nothing per period where several ran). */
    double roomy = c->ours + c->idle - HEADROOM_PCT / 100.0;
    if (g_shim.ledger.policy[d] == CGPU_COMPUTE_SHARE && now_us >= c->yield_until_us && roomy > rate)
        rate = roomy > 1.0 ? 1.0 : roomy;
    long long dt = c->last_tick && now > c->last_tick ? (long long)(now - c->last_tick) : 0;
    c->last_tick = now;
    long long credit = c->credit + (long long)(rate * (double)(dt > 100000000LL ? 100000000LL : dt));

    /* ... less the GPU time measured, whenever a measurement comes: NVML is asked when a
     * period should have ended (then every tick until it has), not every tick. */
    double mine = 0, theirs = 0, slack = 0, device = -1;
    unsigned long long w_us = 0, prev_seen_us = c->seen_us;
    if (now_us >= c->next_poll_us) {
        unsigned long long dev_before = c->dev_seen_us;
        device_samples(c);
        int idle = launches_at(c, c->seen_us - lag_us, launches) == launches;
        w_us = measure(c, l, idle, &mine, &theirs, &slack, &device);
        c->next_poll_us = c->dev_seen_us > dev_before && ctl.samples ? c->dev_seen_us + c->period_us : 0;
    }
    if (c->dev_seen_us > c->measured_us)
        c->measured_us = c->dev_seen_us;
    if (w_us) {
        if (c->seen_us > c->measured_us)
            c->measured_us = c->seen_us;
        double w = (double)w_us * 1000.0;
        /* Others: smoothed over ~1 s (a period names one process when several ran, so one
         * period says little).  When they grow, a `share` container gives up what it took
         * beyond its limit for two periods, so a newcomer finds room at once. */
        if (theirs / w > c->others + YIELD_STEP)
            c->yield_until_us = now_us + 2 * c->period_us;
        if (theirs > 0)
            c->shared_until_us = now_us + SHARED_HOLD_US;
        double a = w / 1e9 > 1 ? 1 : w / 1e9;
        c->others += a * (theirs / w - c->others);
        c->used += a * (mine / w - c->used); /* ours, for readers */
        double charged = mine;
        if (now_us < c->shared_until_us && cost) {
            /* Shared: the launches whose work fell in the span, at the learnt cost. */
            uint64_t n1 = launches_at(c, c->seen_us - lag_us, launches);
            uint64_t n0 = launches_at(c, prev_seen_us > lag_us ? prev_seen_us - lag_us : 0, launches);
            charged = (double)(n1 > n0 ? n1 - n0 : 0) * (double)cost;
        }
        credit -= (long long)charged;
        double f = w / 3e8 > 1 ? 1 : w / 3e8; /* ~0.3 s: both figures are smooth */
        c->ours += f * ((charged > w ? w : charged) / w - c->ours);
        /* The device's idle time, from its own samples (exact, whoever ran); without them,
         * what ours and the others' figures leave. */
        double idle = device >= 0 ? 1.0 - (device > w ? w : device) / w : 1.0 - c->ours - c->others;
        c->idle += f * ((idle < 0 ? 0 : idle) - c->idle);
        c->used_total += mine;
        c->slack_total += slack;
        __atomic_store_n(&k->used, (uint32_t)(c->used * 10000.0 + 0.5), __ATOMIC_RELAXED);
    } else if (!ctl.samples && now_us > c->measured_us + 3 * c->period_us) {
        c->measured_us = now_us - 2 * c->period_us; /* nobody ran for a while: those periods are 0 */
    }
    /* A point of measurement: the cost per launch is GPU time over the launches whose work fell
     * between two such points (admitted a lag earlier). */
    struct mark *last = c->marks_n ? &c->marks[(c->marks_n - 1) % MARKS] : NULL;
    if (!last || c->measured_us > last->t_us) {
        c->marks[c->marks_n++ % MARKS] = (struct mark){c->measured_us, c->used_total, c->slack_total};
        unsigned n = c->marks_n < MARKS ? c->marks_n : MARKS;
        const struct mark *to = &c->marks[(c->marks_n - 1) % MARKS], *from = to;
        for (unsigned i = 1; i < n; i++) {
            const struct mark *m = &c->marks[(c->marks_n - 1 - i) % MARKS];
            from = m;
            if (to->t_us - m->t_us >= (now_us < c->shared_until_us ? SHARED_COST_WINDOW_US : COST_WINDOW_US))
                break;
        }
        uint64_t n1 = launches_at(c, to->t_us - lag_us, launches), n0 = launches_at(c, from->t_us - lag_us, launches);
        if (n1 > n0) {
            double used = to->used_ns - from->used_ns, hidden = to->slack_ns - from->slack_ns;
            /* While what ran is small next to what rounding can hide, assume the most. */
            double est = used > hidden ? used : hidden;
            cost = clampll((long long)(est / (double)(n1 - n0)), COST_MIN_NS, COST_MAX_NS);
        }
    }

    /* Work admitted but not measured yet. */
    uint64_t done = launches_at(c, c->measured_us > lag_us ? c->measured_us - lag_us : 0, launches);
    uint64_t pending = launches > done ? launches - done : 0;
    long long room;
    long long tickets;
    if (cost) {
        room = credit - (long long)(pending > 10000000 ? 10000000 : pending) * cost;
        if (room > BURST_NS + cost) /* saved up: a burst, or one launch */
            credit -= room - (BURST_NS + cost), room = BURST_NS + cost;
        tickets = room <= 0 ? 0 : (room + cost / 2) / cost;
    } else {
        /* Nothing measured yet: one launch at a time until its work has been measured. */
        room = credit;
        if (credit > BURST_NS)
            credit = BURST_NS;
        tickets = pending == 0 && credit > 0 ? 1 : 0;
    }
    credit = clampll(credit, -DEBT_MAX_NS, 1000000000000LL);
    if (ctl.trace && w_us)
        fprintf(ctl.trace, "%llu %d %llu %llu %.1f %.1f %.3f %lld %lld %lld %lld %llu\n", now_us, d, c->seen_us, w_us,
                100.0 * mine / ((double)w_us * 1000.0), 100.0 * theirs / ((double)w_us * 1000.0), rate, cost,
                credit, (long long)pending, tickets, c->period_us);
    c->credit = credit;
    c->cost = cost;
    __atomic_store_n(&k->credit, room, __ATOMIC_RELAXED);
    if (cost)
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
    ctl.samples = (samples_fn)shim_nvml_sym("nvmlDeviceGetSamples");
    ctl.by_uuid = (by_uuid_fn)shim_nvml_sym("nvmlDeviceGetHandleByUUID");
    if (!init_fn || !ctl.proc_util || !ctl.by_uuid || init_fn() != NVML_SUCCESS)
        return 0;
    ctl.own_ns = ns_inode("/proc/self/ns/pid");
    ctl.nested = nested_ns();
    for (unsigned d = 0; d < CGPU_MAX_DEVICES; d++) {
        struct dev_ctl *c = &ctl.dev[d];
        if (g_shim.ledger.compute[d] && ctl.by_uuid(g_shim.ledger.l->devices[d].uuid, &c->nvml) != NVML_SUCCESS)
            c->nvml = NULL; /* not measurable: its launches pace themselves (compute_wait) */
    }
    return 1;
}

/* Start from what is measured now: the samples so far are history, but they tell the sample
 * period (the spacing of the device's samples) and where the last period ended. */
static void take_over(struct dev_ctl *c)
{
    static nvml_sample s[64];
    nvmlDevice_t nvml = c->nvml;
    memset(c, 0, sizeof *c);
    c->nvml = nvml;
    c->period_us = PERIOD_US;
    unsigned long long now = real_us();
    c->seen_us = c->dev_seen_us = c->measured_us = now;
    unsigned type = 0, n = 64;
    if (!ctl.samples || ctl.samples(nvml, 1, now - 5000000ull, &type, &n, s) != NVML_SUCCESS || n < 2 || n > 64)
        return;
    unsigned long long gap = 0;
    for (unsigned i = 1; i < n; i++)
        if (s[i].timeStamp > s[i - 1].timeStamp && (!gap || s[i].timeStamp - s[i - 1].timeStamp < gap))
            gap = s[i].timeStamp - s[i - 1].timeStamp;
    if (gap >= 10000 && gap <= 2000000 && s[n - 1].timeStamp <= now) {
        c->period_us = gap;
        c->period_seen = c->dev_sampled = 1;
        c->seen_us = c->dev_seen_us = c->measured_us = s[n - 1].timeStamp;
    }
}

/* CGPU_COMPUTE_TRACE=<dir>: the controller writes <dir>/compute-<pid>.trace, a line each time
 * NVML gives it a measurement (see docs/operations.md); for diagnosis, off by default. */
static void open_trace(void)
{
    const char *dir = getenv(CGPU_ENV_COMPUTE_TRACE);
    char path[4096];
    if (!dir || !*dir || snprintf(path, sizeof path, "%s/compute-%d.trace", dir, (int)getpid()) >= (int)sizeof path)
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 || !(ctl.trace = fdopen(fd, "a"))) {
        if (fd >= 0)
            close(fd);
        return;
    }
    setvbuf(ctl.trace, NULL, _IOLBF, 0);
    fprintf(ctl.trace, "# now_us dev measured_to_us span_us mine_pct theirs_pct rate cost_ns credit_ns pending "
                       "tickets period_us\n");
}

static void *controller(void *arg)
{
    (void)arg;
    int measurable = -1;
    for (;;) {
        /* Where the host runs the arbiter, it decides; without one (or once it has gone), NVML's
         * samples, looking for the arbiter's socket again every 100 ms. */
        token_run();
        __atomic_store_n(&g_token.mode, TOKEN_OFF, __ATOMIC_RELEASE);
        __atomic_fetch_add(&g_token.seq, 1, __ATOMIC_RELEASE);
        syscall(SYS_futex, &g_token.seq, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
        if (measurable < 0) {
            measurable = nvml_ready();
            int limited = 0;
            for (unsigned d = 0; d < CGPU_MAX_DEVICES; d++)
                limited |= g_shim.ledger.compute[d] != 0;
            if (!measurable && limited)
                fprintf(stderr, "cgpu: NVML per-process utilization is unavailable; the compute limit paces "
                                "each process alone\n");
            open_trace();
        }
        int leading = 0;
        for (unsigned n = 1; n % 10 || !token_socket_present(); n++) { /* ticks; a look each 100 ms */
            uint64_t start = mono_ns();
            if (!leading && measurable && lead()) {
                leading = 1;
                for (unsigned d = 0; d < CGPU_MAX_DEVICES; d++)
                    take_over(&ctl.dev[d]);
            }
            if (leading)
                for (unsigned d = 0; d < g_shim.ledger.l->ndevices && d < CGPU_MAX_DEVICES; d++)
                    if (g_shim.ledger.compute[d] && ctl.dev[d].nvml)
                        tick((int)d, start);
            uint64_t spent = mono_ns() - start;
            sleep_ns(spent < (uint64_t)TICK_NS ? TICK_NS - (long long)spent : 1000000);
        }
    }
    return NULL;
}

void compute_start(void)
{
    int any = 0;
    for (unsigned d = 0; d < CGPU_MAX_DEVICES; d++)
        any |= g_shim.ledger.turns[d] != 0;
    pthread_mutex_lock(&start_mutex);
    if (any && !ctl.started && g_shim.ledger.l && g_shim.ledger.writable) {
        token_enable_slots(); /* before any GRANT can open a gate */
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
    token_forget_process();
}
