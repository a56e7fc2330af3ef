/* Charging, the parts off the hot path (see charge.h). */
#include "charge.h"

#include <stdio.h>

struct ptrtable g_table;

static void report_oom(int dev, uint64_t bytes)
{
    struct ledger *l = g_shim.ledger.l;
    fprintf(stderr,
            "cgpu: out of GPU memory slice on %s: requested %llu bytes, %llu of %llu in use (CUDA_ERROR_OUT_OF_MEMORY)\n",
            l->devices[dev].uuid, (unsigned long long)bytes, (unsigned long long)ledger_used(l, (unsigned)dev),
            (unsigned long long)g_shim.ledger.limit[dev]);
}

CUresult charge_reserve_slow(int dev, uint64_t charge)
{
    /* Free what dead processes held, then try once more. */
    if (ledger_sweep(&g_shim.ledger) > 0 && ledger_charge(&g_shim.ledger, (unsigned)dev, charge, 0) == CGPU_OK)
        return CUDA_SUCCESS;
    report_oom(dev, charge);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

void credit_locked(uint64_t key, unsigned dev, uint64_t charge)
{
    (void)key;
    ledger_credit_locked(&g_shim.ledger, dev, charge);
}

/* The charge was never credited (see untrack): only the table entry comes back. */
void retrack(uint64_t key, const struct untracked *u)
{
    track(key, u->dev, u->charge, u->ctx);
}
