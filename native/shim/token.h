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
 * The launch path: count the launch in flight, then read the gate (both sequentially consistent,
 * so a REVOKE that closes the gate and then sees nothing in flight has seen every launch that
 * passed it), then compare the launch's number with the grant's budget: a grant admits about a
 * work budget's worth of launches (the arbiter's, at the process's learnt time per launch; at
 * least one), so a turn of long kernels is not several of them long.  Process-local memory only: no syscall, no shared cache line with another
 * container. */
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
    long inflight[CGPU_MAX_DEVICES];     /* launches past the gate, not yet returned by the driver */
    uint64_t launches[CGPU_MAX_DEVICES]; /* launches admitted, ever */
    uint64_t stop_at[CGPU_MAX_DEVICES];  /* the grant's last launch (its work budget), or ~0 */
    void *last_ctx[CGPU_MAX_DEVICES];    /* the context of the last launch admitted */
};

extern struct token_gate g_token;

/* The gate was closed: ask for the GPU and wait.  Returns `dev` with the launch counted in
 * flight, or TOKEN_LEFT when the process has left token mode (the caller takes a ticket). */
int token_wait(int dev);
/* Launch `n` reached the grant's budget: the one that equals it closes the gate and says SPENT
 * (1: admitted); one past it (another thread's) is turned back (0, uncounted). */
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

/* Pass the gate of ledger device `dev` if it is open: 1 with the launch counted in flight, or 0
 * (nothing counted). */
static inline int token_try(int dev)
{
    __atomic_fetch_add(&g_token.inflight[dev], 1, __ATOMIC_SEQ_CST);
    if (likely(__atomic_load_n(&g_token.open[dev], __ATOMIC_SEQ_CST))) {
        uint64_t n = __atomic_add_fetch(&g_token.launches[dev], 1, __ATOMIC_RELAXED);
        if (unlikely(n >= __atomic_load_n(&g_token.stop_at[dev], __ATOMIC_RELAXED)) && !token_spent(dev, n))
            return 0;
        token_seen_context(dev);
        return 1;
    }
    __atomic_fetch_sub(&g_token.inflight[dev], 1, __ATOMIC_SEQ_CST);
    return 0;
}

/* Admit one launch on ledger device `dev` in token mode: `dev`, counted in flight, or
 * TOKEN_LEFT. */
static inline int token_admit(int dev)
{
    return likely(token_try(dev)) ? dev : token_wait(dev);
}

#endif
