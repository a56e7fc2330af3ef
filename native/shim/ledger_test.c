/* Test-only entry points (cgpu_test_api.h): built into libcgpu_ledger.so only. */
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cgpu_test_api.h"
#include "ledger.h"


/* A process-wide handle for the test entry point, so charges persist. */
static struct ledger_handle test_handle = {.fd = -1, .slot = -1};
static char test_path[4096];
static pthread_mutex_t test_mutex = PTHREAD_MUTEX_INITIALIZER;

EXPORT int cgpu_ledger_test_charge(const char *path, unsigned int dev, unsigned long long bytes, int sign)
{
    int rc = CGPU_OK;
    pthread_mutex_lock(&test_mutex);
    if (test_handle.l == NULL || strcmp(test_path, path) != 0) {
        ledger_close(&test_handle);
        rc = ledger_open(path, LEDGER_WRITE, &test_handle);
        if (rc == CGPU_OK)
            rc = ledger_claim_slot(&test_handle);
        for (unsigned d = 0; rc == CGPU_OK && d < CGPU_MAX_DEVICES; d++)
            test_handle.limit[d] = test_handle.l->devices[d].limit; /* a test trusts the file */
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

EXPORT int cgpu_ledger_test_hold_lock(const char *path)
{
    static struct ledger_handle held = {.fd = -1, .slot = -1};
    int rc = ledger_open(path, LEDGER_WRITE, &held);
    if (rc == CGPU_OK)
        ledger_lock(&held);
    return rc;
}

EXPORT int cgpu_ledger_test_poke(const char *path, const char *field, unsigned int index, unsigned int dev,
                              unsigned long long value)
{
    size_t at, len = 8;
    if (index >= CGPU_MAX_SLOTS || dev >= CGPU_MAX_DEVICES)
        return CGPU_ERR_CORRUPT;
    if (strcmp(field, "limit") == 0)
        at = offsetof(struct ledger, devices) + dev * sizeof(struct ledger_device) + offsetof(struct ledger_device, limit);
    else if (strcmp(field, "used") == 0)
        at = offsetof(struct ledger, devices) + dev * sizeof(struct ledger_device) + offsetof(struct ledger_device, used);
    else if (strcmp(field, "slot_used") == 0)
        at = offsetof(struct ledger, slots) + index * sizeof(struct ledger_slot) + offsetof(struct ledger_slot, used) +
             dev * sizeof(uint64_t);
    else if (strcmp(field, "in_use") == 0)
        at = offsetof(struct ledger, slots) + index * sizeof(struct ledger_slot), len = 4;
    else if (strcmp(field, "uuid") == 0)
        at = offsetof(struct ledger, devices) + dev * sizeof(struct ledger_device), len = 8;
    else if (strcmp(field, "ndevices") == 0)
        at = offsetof(struct ledger, ndevices), len = 4;
    else
        return CGPU_ERR_PARSE;
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return CGPU_ERR_IO;
    uint32_t v32 = (uint32_t)value;
    ssize_t n = pwrite(fd, len == 4 ? (void *)&v32 : (void *)&value, len, (off_t)at);
    close(fd);
    return n == (ssize_t)len ? CGPU_OK : CGPU_ERR_IO;
}
