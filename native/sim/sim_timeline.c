/* The kernel timeline shared by both libraries: bucketed busy time and each
 * device's time-sliced schedule of the processes' work (see sim_common.h). */
#include "sim_common.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define TAG_MASK ((1ULL << (64 - SIM_TL_NS_BITS)) - 1)
#define NS_MASK ((1ULL << SIM_TL_NS_BITS) - 1)

unsigned long long sim_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

int sim_host_pid(void)
{
    /* Cached per process; a forked child (another getpid()) reads it again. */
    static _Atomic long long cache; /* getpid() << 32 | pid in /proc */
    int me = getpid();
    long long c = atomic_load_explicit(&cache, memory_order_relaxed);
    if (c && (int)(c >> 32) == me)
        return (int)(c & 0xffffffff);
    char buf[32];
    ssize_t n = readlink("/proc/self", buf, sizeof buf - 1);
    int pid = me;
    if (n > 0) {
        buf[n] = 0;
        char *end;
        long v = strtol(buf, &end, 10);
        if (*end == 0 && v > 0 && v < 0x7fffffff)
            pid = (int)v;
    }
    atomic_store_explicit(&cache, (long long)me << 32 | (unsigned)pid, memory_order_relaxed);
    return pid;
}

void sim_sleep_until(unsigned long long t)
{
    struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ULL), .tv_nsec = (long)(t % 1000000000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* Add `ns` to bucket number `bno`: a stale word (another tag) starts over;
 * a newer one (a far-future bucket that reused the slot) is left alone. */
static void bucket_add(struct sim_tl *tl, unsigned long long bno, unsigned long long ns)
{
    _Atomic unsigned long long *w = &tl->b[bno % SIM_TL_BUCKETS];
    unsigned long long tag = bno & TAG_MASK;
    unsigned long long old = atomic_load_explicit(w, memory_order_relaxed), neu;
    do {
        unsigned long long otag = old >> SIM_TL_NS_BITS;
        if (otag == tag)
            neu = old + ns;
        else if (otag > tag)
            return;
        else
            neu = tag << SIM_TL_NS_BITS | ns;
    } while (!atomic_compare_exchange_weak_explicit(w, &old, neu, memory_order_relaxed,
                                                    memory_order_relaxed));
}

void sim_tl_add(struct sim_tl *tl, unsigned long long s, unsigned long long e)
{
    while (s < e) {
        unsigned long long bno = s / SIM_TL_BUCKET_NS;
        unsigned long long bend = (bno + 1) * SIM_TL_BUCKET_NS;
        unsigned long long stop = e < bend ? e : bend;
        bucket_add(tl, bno, stop - s);
        s = stop;
    }
}

unsigned long long sim_tl_busy(const struct sim_tl *tl, unsigned long long b0, unsigned long long b1)
{
    unsigned long long total = 0;
    for (unsigned long long bno = b0; bno < b1; bno++) {
        unsigned long long w = atomic_load_explicit(&tl->b[bno % SIM_TL_BUCKETS], memory_order_relaxed);
        if (w >> SIM_TL_NS_BITS == (bno & TAG_MASK))
            total += w & NS_MASK;
    }
    return total;
}

void sim_sched_lock(const struct sim_sched *s)
{
    /* Robust: a process killed while it held the lock leaves at worst one step of the
     * schedule half written (a run interval counted or not), never a lock held forever. */
    if (pthread_mutex_lock(&s->d->mu) == EOWNERDEAD)
        pthread_mutex_consistent(&s->d->mu);
}

void sim_sched_unlock(const struct sim_sched *s)
{
    pthread_mutex_unlock(&s->d->mu);
}

/* The work behind run-queue id `id`, and its per-process timeline and busy counter; NULL
 * when the slot's timeline now serves another device (a slot taken over by a new process). */
static struct sim_work *work_of(const struct sim_sched *s, int id, struct sim_tl **tl,
                                _Atomic unsigned long long **busy)
{
    *tl = NULL;
    *busy = NULL;
    if (!s->f)
        return id == 0 ? s->priv : NULL;
    if (id < 0 || id >= SIM_STATE_SLOTS * SIM_SLOT_TL)
        return NULL;
    struct sim_state_slot *slot = &s->f->slots[id / SIM_SLOT_TL];
    int i = id % SIM_SLOT_TL;
    if (atomic_load_explicit(&slot->tl_dev[i], memory_order_acquire) != s->sdev + 1)
        return NULL;
    *tl = &slot->tl[i];
    *busy = &slot->busy[s->sdev];
    return &slot->work[i];
}

/* Whether the process behind run-queue id `id` lives (looked at when it would take the
 * device: a process killed with work queued loses it at its next turn). */
static int owner_alive(const struct sim_sched *s, int id)
{
    if (!s->f)
        return 1;
    struct sim_state_slot *slot = &s->f->slots[id / SIM_SLOT_TL];
    int pid = atomic_load(&slot->pid);
    return !s->alive || pid == sim_host_pid() || s->alive(pid, atomic_load(&slot->start_time));
}

static unsigned long long pending_of(const struct sim_work *w)
{
    unsigned long long d = atomic_load_explicit(&w->done, memory_order_relaxed);
    return w->queued > d ? w->queued - d : 0;
}

static void rq_remove(struct sim_tl_dev *d, int k)
{
    for (int j = k; j + 1 < d->nrq; j++)
        d->rq[j] = d->rq[j + 1];
    d->nrq--;
}

/* Record that `w` ran [t, t + len). */
static void run(const struct sim_sched *s, struct sim_work *w, struct sim_tl *tl,
                _Atomic unsigned long long *busy, unsigned long long t, unsigned long long len)
{
    unsigned long long w0 = atomic_load_explicit(&w->done, memory_order_relaxed);
    struct sim_seg *last = w->nseg ? &w->seg[(w->nseg - 1) % SIM_SEGS] : NULL;
    if (last && last->t0 + last->len == t && last->w0 + last->len == w0)
        last->len += len; /* runs on: one interval */
    else
        w->seg[w->nseg++ % SIM_SEGS] = (struct sim_seg){.t0 = t, .w0 = w0, .len = len};
    sim_tl_add(&s->d->tl, t, t + len);
    if (tl)
        sim_tl_add(tl, t, t + len);
    if (busy)
        atomic_fetch_add_explicit(busy, len, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->d->busy_ns, len, memory_order_relaxed);
    atomic_store_explicit(&w->done, w0 + len, memory_order_release);
}

void sim_sched_advance(const struct sim_sched *s, unsigned long long now)
{
    struct sim_tl_dev *d = s->d;
    if (d->nrq < 0 || d->nrq > SIM_RUNQ) /* a state file written by something else */
        d->nrq = 0;
    unsigned long long t = d->at;
    if (!t || d->nrq == 0) { /* idle: nothing to run up to now */
        if (now > t)
            d->at = now;
        d->cur = 0;
        return;
    }
    while (t < now) {
        if (!d->cur) { /* the next context with work takes the device */
            while (d->nrq) {
                struct sim_tl *tl;
                _Atomic unsigned long long *busy;
                struct sim_work *w = work_of(s, d->rq[0], &tl, &busy);
                if (w && pending_of(w) && owner_alive(s, d->rq[0]))
                    break;
                if (w) /* a dead process's work goes with its context, as the driver's does */
                    atomic_store_explicit(&w->done, w->queued, memory_order_release);
                rq_remove(d, 0);
            }
            if (!d->nrq)
                break;
            int id = d->rq[0] + 1;
            d->run_from = t;
            if (d->last && d->last != id) { /* save one context, restore the other */
                d->run_from = t + s->sw;
                d->switches++;
            }
            d->last = id;
            d->cur = id;
            d->slice_end = d->run_from + s->slice;
        }
        if (t < d->run_from) {
            t = d->run_from < now ? d->run_from : now;
            continue;
        }
        struct sim_tl *tl;
        _Atomic unsigned long long *busy;
        struct sim_work *w = work_of(s, d->cur - 1, &tl, &busy);
        unsigned long long left = w ? pending_of(w) : 0;
        if (left) {
            unsigned long long until = t + left;
            if (until > d->slice_end)
                until = d->slice_end;
            if (until > now)
                until = now;
            if (until > t)
                run(s, w, tl, busy, t, until - t);
            t = until;
            left = pending_of(w);
        }
        if (!left) { /* out of work: it leaves the run queue, the next one runs */
            rq_remove(d, 0);
            d->cur = 0;
        } else if (t >= d->slice_end) {
            if (d->nrq > 1) { /* preempted at the end of its slice: to the back */
                int id = d->rq[0];
                rq_remove(d, 0);
                d->rq[d->nrq++] = id;
                d->cur = 0;
            } else {
                d->slice_end = t + s->slice; /* alone: runs on */
            }
        }
    }
    if (!d->nrq)
        d->cur = 0;
    if (now > d->at)
        d->at = now;
}

unsigned long long sim_sched_queue(const struct sim_sched *s, int id, struct sim_work *w,
                                   unsigned long long ns)
{
    struct sim_tl_dev *d = s->d;
    if (!d->at)
        d->at = sim_now_ns();
    if (ns) {
        int in = 0;
        for (int k = 0; k < d->nrq && !in; k++)
            in = d->rq[k] == id;
        if (!in) {
            if (d->nrq < 0 || d->nrq >= SIM_RUNQ)
                return 0;
            d->rq[d->nrq++] = id;
        }
        w->queued += ns;
    }
    return w->queued;
}

unsigned long long sim_sched_pending(const struct sim_sched *s)
{
    unsigned long long total = 0;
    for (int k = 0; k < s->d->nrq; k++) {
        struct sim_tl *tl;
        _Atomic unsigned long long *busy;
        struct sim_work *w = work_of(s, s->d->rq[k], &tl, &busy);
        if (w)
            total += pending_of(w);
    }
    return total;
}

unsigned long long sim_work_time(const struct sim_work *w, unsigned long long mark)
{
    unsigned long long n = w->nseg, oldest = n > SIM_SEGS ? n - SIM_SEGS : 0;
    for (unsigned long long i = n; i > oldest; i--) {
        const struct sim_seg *g = &w->seg[(i - 1) % SIM_SEGS];
        if (mark > g->w0 + g->len)
            return g->t0 + g->len; /* between two intervals: at the end of the earlier */
        if (mark > g->w0)
            return g->t0 + (mark - g->w0);
        if (i - 1 == oldest)
            return g->t0;
    }
    return 0;
}

struct sim_tl *sim_slot_tl(struct sim_state_slot *slot, int sdev, int create)
{
    for (int i = 0; i < SIM_SLOT_TL; i++) {
        int v = atomic_load_explicit(&slot->tl_dev[i], memory_order_acquire);
        if (v == sdev + 1)
            return &slot->tl[i];
        if (v == 0) {
            if (!create)
                return NULL;
            int zero = 0;
            if (atomic_compare_exchange_strong(&slot->tl_dev[i], &zero, sdev + 1) ||
                zero == sdev + 1)
                return &slot->tl[i];
        }
    }
    return NULL;
}
