/* Internal interfaces of libcgpu.so: the shim's set-up (shim.c) and its shared state.
 *
 * Files and who calls whom.  Calls and includes run one way, downwards; nothing
 * below calls anything above it (tests/core/test_layers.py checks it, with this table):
 *
 *   hooks_mem.c hooks_vmm.c hooks_ctx.c hooks_info.c   the exported CUDA/NVML wrappers
 *   hooks_graph.c hooks_module.c                       graph memory, module globals
 *   hooks_launch.c                                     launch entry points (compute limit)
 *   entry.c                                            dlsym and cuGetProcAddress: the
 *        |                                             hooks.def table -> the wrappers
 *        v
 *   charge.c/.h     reserve, track, untrack: the ledger plus this process's pointer table
 *   compute.c/.h    the compute limit: ticket gate, controller thread (NVML-measured)
 *        v
 *   token.c/.h      ... or, where the host runs the arbiter, its time-slice tokens
 *        v
 *   shim.c          set-up: the slices (request.c or cgpu.conf), the ledger, NVML's view
 *        v
 *   request.c       the limit variables (the one parser; also in libcgpu_ledger.so)
 *   ledger_read.c   readers from the host: cgpu_ledger_snapshot (pread, seqlock)
 *   ledger_test.c   test-only entry points (libcgpu_ledger.so only)
 *        v
 *   ledger.c        the shared ledger file: open, create, lock, slots, charge, credit
 *        v
 *   config.c        cgpu.conf and sizes
 *   ptrtable.c      the per-process pointer table
 *   resolve.c       the real driver and NVML (dlsym, handles, real functions)
 *   errors.c        cgpu_strerror
 *
 * The helper macros (EXPORT, NO_SANITIZE, likely, unlikely, MiB) are in
 * native/include/cgpu_macros.h, for the shim and the simulator alike.
 * libcgpu_ledger.so (cffi) is ledger.c + ledger_read.c + config.c + request.c +
 * errors.c + ledger_test.c.  README.md says why the ledger is built as it is.
 */
#ifndef CGPU_SHIM_H
#define CGPU_SHIM_H

#include <stdint.h>

#include "cgpu_macros.h"
#include "cgpu_nvml.h"
#include "ledger.h"
#include "resolve.h"


enum { SHIM_UNINIT = 0, SHIM_PASSTHROUGH = 1, SHIM_LIMITED = 2, SHIM_FAILED = 3 };
#define SHIM_MAX_ORDINALS 64
#define SHIM_MULTI_DEVICE (-3)

/* What an allocation and a free read comes first, with the ledger handle's head (its file,
 * slot, and what this process holds on its first four devices): a free of a process that sees
 * one of those devices reads no other line of it (an allocation also reads the slice, `limit`,
 * two lines on).  PyTorch's path finds these lines evicted at each call (docs/performance.md). */
struct shim_state {
    int state;               /* SHIM_*; read with acquire loads */
    int single_device;       /* ledger index when the process sees one device, else SHIM_MULTI_DEVICE */
    struct ledger_handle ledger;
    int (*ctx_get_device)(int *); /* the real cuCtxGetDevice */
    int (*ctx_get_current)(void **); /* the real cuCtxGetCurrent */
    int devmap[SHIM_MAX_ORDINALS]; /* CUDA ordinal -> ledger index, -1 = no slice */
    int contexts[CGPU_MAX_DEVICES]; /* live contexts of this process per ledger device */
    void *primary[SHIM_MAX_ORDINALS]; /* each ordinal's primary context, once retained */
    char dir[4096];          /* the ledger directory (cgpu.conf, cgpu.ledger, compute.sock) */
} __attribute__((aligned(64)));

extern struct shim_state g_shim;

/* Work out the limits and open the ledger; returns the new state, or
 * SHIM_UNINIT while a limit applies but the driver cannot be asked yet. */
int shim_cuda_init(int driver_ready);
/* Claim this process's ledger slot; 0 on success. */
int shim_claim_slot(void);
/* Context overhead: sample before the driver creates a context, then the charge. */
void shim_context_overhead_before(int dev);
uint64_t shim_context_overhead(int dev);
/* The slice and use behind an NVML device; returns SHIM_* (LIMITED fills both). */
int shim_nvml_view(nvmlDevice_t device, uint64_t *limit, uint64_t *used);
/* In a forked child: drop the parent's slot and state. */
void shim_forget_process(void);
/* Whether this process has a compute limit on any device (decided once, from the same
 * sources as the slices: cgpu.conf, else the environment).  Launch entry points are
 * hooked only when it does. */
int compute_enabled(void);
/* One line on stderr: "cgpu: <message>; refusing to run without the GPU limits it was given". */
__attribute__((format(printf, 1, 2))) void shim_fail_line(const char *fmt, ...);

/* SHIM_LIMITED, SHIM_PASSTHROUGH, SHIM_FAILED, or SHIM_UNINIT while a limit
 * applies but the driver is not initialised; initialises on first use. */
static inline int mode(void)
{
    int s = __atomic_load_n(&g_shim.state, __ATOMIC_ACQUIRE);
    if (likely(s == SHIM_LIMITED))
        return s;
    if (s == SHIM_UNINIT)
        s = shim_cuda_init(0);
    return s;
}

/* Ledger index of the calling thread's current device: -1 when that device
 * has no slice, -2 when there is no current context. */
static inline int current_device(void)
{
    int single = g_shim.single_device;
    if (likely(single != SHIM_MULTI_DEVICE))
        return single;
    int d;
    if (!g_shim.ctx_get_device || g_shim.ctx_get_device(&d) != 0)
        return -2;
    return (d >= 0 && d < SHIM_MAX_ORDINALS) ? g_shim.devmap[d] : -1;
}

static inline int device_of_ordinal(int d)
{
    return (d >= 0 && d < SHIM_MAX_ORDINALS) ? g_shim.devmap[d] : -1;
}

#endif
