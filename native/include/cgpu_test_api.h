/* Test-only entry points of the binding library libcgpu_ledger.so (never of the
 * preloaded shim).  Plain C for cffi, like cgpu_api.h. */

/* Charge or credit `bytes` on device index `dev` for the calling process's slot,
 * exactly as the shim does it.  `sign` is +1 or -1. */
int cgpu_ledger_test_charge(const char *path, unsigned int dev, unsigned long long bytes, int sign);

/* Take the ledger's lock and keep it (until this process dies), to show that
 * readers never hang and that a dead holder's lock is repaired. */
int cgpu_ledger_test_hold_lock(const char *path);

/* Write `value` into one field of a ledger file, as a hostile container could:
 * "limit", "used" or "uuid" (first 8 bytes) of device `dev`, "slot_used" (device
 * `dev` of slot `index`), "in_use" of slot `index`, or "ndevices". */
int cgpu_ledger_test_poke(const char *path, const char *field, unsigned int index, unsigned int dev,
                          unsigned long long value);
