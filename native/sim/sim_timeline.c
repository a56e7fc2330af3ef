/* The kernel timeline shared by both libraries: bucketed busy time and the
 * lock-free reservation of a device's next free interval (see sim_common.h). */
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

unsigned long long sim_tl_reserve(struct sim_tl_dev *d, unsigned long long now,
                                  unsigned long long earliest, unsigned long long dur,
                                  unsigned long long *start)
{
    unsigned long long old = atomic_load_explicit(&d->busy_until, memory_order_acquire);
    for (;;) {
        unsigned long long s = old > earliest ? old : earliest;
        if (s + dur > now + SIM_TL_AHEAD_NS && s > now)
            return s + dur - SIM_TL_AHEAD_NS;
        if (atomic_compare_exchange_weak_explicit(&d->busy_until, &old, s + dur,
                                                  memory_order_acq_rel, memory_order_acquire)) {
            atomic_fetch_add_explicit(&d->busy_ns, dur, memory_order_relaxed);
            *start = s;
            return 0;
        }
    }
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
