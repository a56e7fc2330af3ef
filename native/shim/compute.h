/* The compute (GPU time) limit: the launch gate and the container's controller (compute.c).
 *
 * The launch path takes one ticket per launch from the container-wide counter of its device in
 * the ledger (ledger_compute.tickets): two relaxed atomics, and a wait only when the container has
 * used up its budget.  The controller (one process of the container at a time) measures the
 * container's GPU time, keeps the budget, and refills the tickets every tick.  See
 * docs/architecture.md, "Compute share". */
#ifndef CGPU_COMPUTE_H
#define CGPU_COMPUTE_H

#include "shim.h"
#include "token.h"

/* Start this process's controller thread (idempotent); after the ledger is open.  The first
 * launch that finds no ticket starts it, so only processes that launch run one. */
void compute_start(void);
/* In a forked child: the parent's thread is gone. */
void compute_forget_process(void);
/* The slow path of compute_admit: wait for a ticket (or, in token mode, the GPU) on ledger
 * device `dev`; best effort (no limit), only for the compute thread to find out whether the
 * arbiter is there.  Returns what compute_admit does. */
int compute_wait(int dev);

/* Admit one launch (or graph launch) on the calling thread's current device.  Returns where
 * the launch is marked in flight (token mode: pass it to compute_submitted once the driver has
 * the work), or -1. */
static inline int compute_admit(void)
{
    if (unlikely(mode() != SHIM_LIMITED))
        return -1;
    int d = current_device();
    if (d < 0 || !g_shim.ledger.turns[d])
        return -1;
    if (__atomic_load_n(&g_token.mode, __ATOMIC_RELAXED) == TOKEN_ON) {
        int held = token_admit(d);
        if (likely(held != TOKEN_LEFT))
            return held;
    }
    if (!g_shim.ledger.compute[d]) /* best effort: turns only while the arbiter gives them */
        return __atomic_load_n(&g_token.mode, __ATOMIC_RELAXED) == TOKEN_OFF ? -1 : compute_wait(d);
    struct ledger_compute *k = &g_shim.ledger.l->compute[d];
    if (likely(__atomic_fetch_sub(&k->tickets, 1, __ATOMIC_RELAXED) > 0)) {
        __atomic_fetch_add(&k->launches, 1, __ATOMIC_RELAXED);
        return -1;
    }
    return compute_wait(d);
}

/* The driver has taken (or refused) the launch compute_admit counted. */
static inline void compute_submitted(int held)
{
    if (held >= 0)
        token_submitted(held);
}

#endif
