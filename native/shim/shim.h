/* State shared by the shim's interposers (shim.c) and its set-up (limits.c). */
#ifndef CGPU_SHIM_H
#define CGPU_SHIM_H

#include <stdint.h>

#include "cgpu_nvml.h"
#include "ledger.h"

enum { SHIM_UNINIT = 0, SHIM_PASSTHROUGH = 1, SHIM_LIMITED = 2, SHIM_FAILED = 3 };
#define SHIM_MAX_ORDINALS 64
#define SHIM_MULTI_DEVICE (-3)

struct shim_state {
    int state;               /* SHIM_*; read with acquire loads */
    int single_device;       /* ledger index when the process sees one device, else SHIM_MULTI_DEVICE */
    int devmap[SHIM_MAX_ORDINALS]; /* CUDA ordinal -> ledger index, -1 = no slice */
    int contexts[CGPU_MAX_DEVICES]; /* live contexts of this process per ledger device */
    struct ledger_handle ledger;
    int (*ctx_get_device)(int *); /* the real cuCtxGetDevice */
    int (*ctx_get_current)(void **); /* the real cuCtxGetCurrent */
};

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

/* Real entry points, never the shim's own. */
void *shim_driver_sym(const char *name);
void *shim_nvml_sym(const char *name);

#endif
