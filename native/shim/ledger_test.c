/* Test-only entry points (cgpu_test_api.h): built into libcgpu_ledger.so only. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cgpu_test_api.h"
#include "ledger.h"

#define API __attribute__((visibility("default")))

/* A process-wide handle for the test entry point, so charges persist. */
static struct ledger_handle test_handle = {.fd = -1, .slot = -1};
static char test_path[4096];
static pthread_mutex_t test_mutex = PTHREAD_MUTEX_INITIALIZER;

API int cgpu_ledger_test_charge(const char *path, unsigned int dev, unsigned long long bytes, int sign)
{
    int rc = CGPU_OK;
    pthread_mutex_lock(&test_mutex);
    if (test_handle.l == NULL || strcmp(test_path, path) != 0) {
        ledger_close(&test_handle);
        rc = ledger_open(path, LEDGER_WRITE, &test_handle);
        if (rc == CGPU_OK)
            rc = ledger_claim_slot(&test_handle);
        snprintf(test_path, sizeof test_path, "%s", path);
    }
    if (rc == CGPU_OK && dev >= test_handle.l->ndevices)
        rc = CGPU_ERR_CORRUPT;
    if (rc == CGPU_OK) {
        if (sign >= 0)
            rc = ledger_charge(&test_handle, dev, bytes, 0);
        else
            ledger_credit(&test_handle, dev, bytes);
    }
    pthread_mutex_unlock(&test_mutex);
    return rc;
}

API int cgpu_ledger_test_hold_lock(const char *path)
{
    static struct ledger_handle held = {.fd = -1, .slot = -1};
    int rc = ledger_open(path, LEDGER_WRITE, &held);
    if (rc == CGPU_OK)
        ledger_lock(held.l);
    return rc;
}
