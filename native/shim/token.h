/* The arbiter's token gate (token.c).
 *
 * Where the host runs `cgpu compute-arbiter`, it leaves a socket, compute.sock, in the container's
 * directory, and time-slices each GPU among the containers with a compute limit: one container at
 * a time holds a GPU, for a quantum or until it goes idle.  Every process of the container keeps
 * one connection; the arbiter opens its gate (GRANT) and closes it (REVOKE), and the process
 * answers a REVOKE once the work it launched has finished (DONE), so the next holder finds the
 * GPU free.  The arbiter charges each container the time it held the GPU; its limit comes from
 * the host's cgpu.conf and its identity from the socket it connected on, so nothing a container
 * writes changes another's share.
 *
 * The launch path: mark the launch in flight, then read the gate, so a REVOKE that closes the
 * gate and then sees nothing in flight has seen every launch that passed it.  Each launching
 * thread marks and counts its launches in a slot of its own (struct token_slot): plain stores,
 * no locked instruction; the REVOKE's side pays for the order with membarrier(2), which makes
 * every running thread of the process pass a full barrier between the gate's close and the look
 * at the slots (the asymmetric fence of userspace RCU).  Where membarrier is refused, or the
 * slots are all taken, a thread counts in the shared counters instead (locked, sequentially
 * consistent).  A grant with a budget (long kernels, or a container of several busy processes)
 * counts on the shared counter too: the launch's number is compared with the grant's budget, a
 * work budget's worth of launches (the arbiter's, at the process's learnt time per launch; at
 * least one), so a turn of long kernels is not several of them long.  Process-local memory
 * only: no syscall, no shared cache line with another container. */
#ifndef CGPU_TOKEN_H
#define CGPU_TOKEN_H

#include "shim.h"

enum { TOKEN_UNDECIDED = 0, TOKEN_ON = 1, TOKEN_OFF = 2 };
#define TOKEN_LEFT (-2) /* token_admit: the process is no longer in token mode */

struct token_gate {
    int mode;                            /* TOKEN_*, set by the compute thread */
    uint32_t seq;                        /* futex word: bumped when a gate opens or the mode changes */
    uint32_t open[CGPU_MAX_DEVICES];     /* 1 while the container holds that GPU */
    uint32_t want_sent[CGPU_MAX_DEVICES]; /* when a WANT went out since the last GRANT (ms), or 0 */
    uint32_t waiting[CGPU_MAX_DEVICES];  /* launchers in token_wait (a DONE says whether any is) */
    long inflight[CGPU_MAX_DEVICES];     /* launches past the gate, not yet returned by the driver */
    uint64_t launches[CGPU_MAX_DEVICES]; /* launches admitted, ever */
    uint64_t stop_at[CGPU_MAX_DEVICES];  /* the grant's last launch (its work budget), or ~0 */
    void *last_ctx[CGPU_MAX_DEVICES];    /* the context of the last launch admitted */
};

extern struct token_gate g_token;

#define TOKEN_SLOTS 256          /* launching threads counted without a locked instruction */
#define TOKEN_HELD_SLOT 0x100    /* compute_admit's result: the launch is marked in the thread's slot */

/* One launching thread's marks, written by that thread alone. */
struct token_slot {
    uint32_t owner;                      /* 1 while a thread has it */
    uint32_t inflight[CGPU_MAX_DEVICES]; /* 1 while the thread is between the gate and the driver */
    uint64_t launches[CGPU_MAX_DEVICES]; /* launches admitted without a budget, ever */
} __attribute__((aligned(64)));

extern struct token_slot token_no_slot; /* the thread counts in g_token's counters */
extern __thread struct token_slot *token_my_slot __attribute__((tls_model("initial-exec")));

/* The calling thread's first gated launch: a slot, or &token_no_slot. */
struct token_slot *token_claim_slot(void);
/* Ask the kernel for membarrier (once per process, before the compute thread starts): without
 * it every thread counts in the shared counters. */
void token_enable_slots(void);

/* The gate was closed: ask for the GPU and wait.  Returns what token_try does on success (the
 * launch marked in flight), or TOKEN_LEFT when the process has left token mode (the caller
 * takes a ticket). */
int token_wait(int dev);
/* Launch `n` reached the grant's budget: the one that equals it closes the gate and says SPENT
 * (1: admitted); one past it (another thread's) is turned back (0, its number given back; the
 * caller unmarks it). */
int token_spent(int dev, uint64_t n);
/* Remember a context that launched on `dev` (drained on REVOKE). */
void token_note_context(int dev, void *ctx);
/* The compute thread's token loop.  Returns 0 at once when there is no arbiter to talk to, or
 * later when it has been gone for a second (the caller then runs the NVML controller). */
int token_run(void);
/* Whether the arbiter's socket is in the container's directory. */
int token_socket_present(void);
/* In a forked child: the parent's connection and thread are not ours. */
void token_forget_process(void);

static inline void token_seen_context(int dev)
{
    void *c;
    if (g_shim.ctx_get_current && g_shim.ctx_get_current(&c) == 0 &&
        unlikely(c != __atomic_load_n(&g_token.last_ctx[dev], __ATOMIC_RELAXED)))
        token_note_context(dev, c);
}

/* A launch under a grant with a budget: its number on the shared counter. 1: admitted. */
static inline int token_budgeted(int dev)
{
    uint64_t n = __atomic_add_fetch(&g_token.launches[dev], 1, __ATOMIC_RELAXED);
    return likely(n < __atomic_load_n(&g_token.stop_at[dev], __ATOMIC_RELAXED)) || token_spent(dev, n);
}

/* Pass the gate of ledger device `dev` if it is open: `dev` (marked in the shared in-flight
 * count) or `dev | TOKEN_HELD_SLOT` (in the thread's slot), or -1 (nothing marked). */
static inline int token_try(int dev)
{
    struct token_slot *s = token_my_slot;
    if (unlikely(!s))
        s = token_claim_slot();
    if (likely(s != &token_no_slot)) {
        __atomic_store_n(&s->inflight[dev], 1, __ATOMIC_RELAXED);
        __atomic_signal_fence(__ATOMIC_SEQ_CST); /* the CPU's barrier: the REVOKE's membarrier */
        if (likely(__atomic_load_n(&g_token.open[dev], __ATOMIC_ACQUIRE))) {
            if (likely(__atomic_load_n(&g_token.stop_at[dev], __ATOMIC_RELAXED) == UINT64_MAX)) {
                __atomic_store_n(&s->launches[dev], __atomic_load_n(&s->launches[dev], __ATOMIC_RELAXED) + 1,
                                 __ATOMIC_RELAXED);
                token_seen_context(dev);
                return dev | TOKEN_HELD_SLOT;
            }
            if (token_budgeted(dev)) {
                token_seen_context(dev);
                return dev | TOKEN_HELD_SLOT;
            }
        }
        __atomic_store_n(&s->inflight[dev], 0, __ATOMIC_RELEASE);
        return -1;
    }
    __atomic_fetch_add(&g_token.inflight[dev], 1, __ATOMIC_SEQ_CST);
    if (likely(__atomic_load_n(&g_token.open[dev], __ATOMIC_SEQ_CST))) {
        if (likely(__atomic_load_n(&g_token.stop_at[dev], __ATOMIC_RELAXED) == UINT64_MAX)) {
            __atomic_fetch_add(&g_token.launches[dev], 1, __ATOMIC_RELAXED);
            token_seen_context(dev);
            return dev;
        }
        if (token_budgeted(dev)) {
            token_seen_context(dev);
            return dev;
        }
    }
    __atomic_fetch_sub(&g_token.inflight[dev], 1, __ATOMIC_SEQ_CST);
    return -1;
}

/* The driver has returned the launch `held` (token_try's result) marked. */
static inline void token_submitted(int held)
{
    int dev = held & (TOKEN_HELD_SLOT - 1);
    if (held & TOKEN_HELD_SLOT)
        __atomic_store_n(&token_my_slot->inflight[dev], 0, __ATOMIC_RELEASE);
    else
        __atomic_fetch_sub(&g_token.inflight[dev], 1, __ATOMIC_RELEASE);
}

/* Admit one launch on ledger device `dev` in token mode: token_try's result, or TOKEN_LEFT. */
static inline int token_admit(int dev)
{
    int held = token_try(dev);
    return likely(held >= 0) ? held : token_wait(dev);
}

#endif
