/* Test-only entry points of the binding library libcgpu_ledger.so (never of the
 * preloaded shim).  Plain C for cffi, like cgpu_api.h. */

/* Charge or credit `bytes` on device index `dev` for the calling process's slot,
 * exactly as the shim does it.  `sign` is +1 or -1. */
int cgpu_ledger_test_charge(const char *path, unsigned int dev, unsigned long long bytes, int sign);

/* Take the ledger's lock and keep it (until this process dies), to show that
 * readers never hang and that a dead holder's lock is repaired. */
int cgpu_ledger_test_hold_lock(const char *path);
