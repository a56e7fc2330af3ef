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

/* Start this process's controller thread (idempotent); after the ledger is open.  The first
 * launch that finds no ticket starts it, so only processes that launch run one. */
void compute_start(void);
/* In a forked child: the parent's thread is gone. */
void compute_forget_process(void);
/* The slow path of compute_admit: wait for a ticket on ledger device `dev`. */
void compute_wait(int dev);

/* Admit one launch (or graph launch) on the calling thread's current device. */
static inline void compute_admit(void)
{
    if (unlikely(mode() != SHIM_LIMITED))
        return;
    int d = current_device();
    if (d < 0 || !g_shim.ledger.compute[d])
        return;
    struct ledger_compute *k = &g_shim.ledger.l->compute[d];
    if (likely(__atomic_fetch_sub(&k->tickets, 1, __ATOMIC_RELAXED) > 0)) {
        __atomic_fetch_add(&k->launches, 1, __ATOMIC_RELAXED);
        return;
    }
    compute_wait(d);
}

#endif
