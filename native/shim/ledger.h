/* The container ledger: one mmap'd file shared by every process of a container.
 *
 * Every charge and credit changes the device total and the process slot together
 * under a process-shared robust mutex, so a process killed at any instruction
 * leaves state that the next locker repairs exactly (see ledger_lock).
 * A process marks its slot alive with a POSIX read lock on one byte of the file;
 * the kernel drops it when the process dies, in any pid namespace.
 */
#ifndef CGPU_LEDGER_H
#define CGPU_LEDGER_H

#include <pthread.h>
#include <stdint.h>

#include "api.h"

#define CGPU_LEDGER_MAGIC_STR "CGPULDG1"
#define CGPU_LEDGER_VERSION 1u
#define CGPU_LEDGER_NAME "cgpu.ledger"
/* Liveness locks live past the end of the data, one byte per slot. */
#define CGPU_LIVENESS_BASE (1ull << 30)

struct ledger_device {
    char uuid[CGPU_UUID_LEN];
    uint64_t limit;
    uint64_t used; /* written under the lock, read with atomic loads */
    uint64_t peak;
};

struct ledger_slot {
    uint32_t in_use;
    int32_t pid;
    uint64_t start_time;
    uint64_t used[CGPU_MAX_DEVICES];
};

struct ledger {
    char magic[8];
    uint32_t version;
    uint32_t size;
    uint32_t ndevices;
    uint32_t active; /* process slots in use (under the lock; read without it) */
    union {
        pthread_mutex_t mutex;
        char pad[64];
    } lock;
    struct ledger_device devices[CGPU_MAX_DEVICES];
    struct ledger_slot slots[CGPU_MAX_SLOTS];
};

/* A mapped ledger. */
struct ledger_handle {
    struct ledger *l;
    int fd;
    int writable;
    int slot; /* this process's slot, -1 if none */
};

/* How to open a ledger: to read it (readers on the host), to charge it, or to
 * charge it and create it when missing (a missing or empty file is initialised). */
enum { LEDGER_READ, LEDGER_WRITE, LEDGER_CREATE };

/* Open the ledger file at `path`.  Returns CGPU_OK or CGPU_ERR_*. */
int ledger_open(const char *path, int mode, struct ledger_handle *h);
void ledger_close(struct ledger_handle *h);

/* Lock/unlock the ledger; lock repairs totals after a holder died. */
void ledger_lock(struct ledger *l);
void ledger_unlock(struct ledger *l);

/* Add the devices of `cfg` that the ledger lacks.  Returns CGPU_OK or CGPU_ERR_FULL. */
int ledger_ensure_devices(struct ledger_handle *h, const struct cgpu_config *cfg);
/* Index of `uuid` in the ledger, or -1. */
int ledger_find_device(const struct ledger *l, const char *uuid);

/* Claim a process slot for the caller and hold its liveness lock. */
int ledger_claim_slot(struct ledger_handle *h);

/* Give up the caller's slot at a clean exit: its charges go with it. */
void ledger_release_slot(struct ledger_handle *h);

/* Free the slots of dead processes.  Must be called WITHOUT the lock held.
 * Returns the number of slots freed. */
unsigned ledger_sweep(struct ledger_handle *h);

/* Charge `bytes` to device `dev` for the caller's slot; fails with
 * CGPU_ERR_LIMIT when it would exceed the slice.  `force` skips the check. */
int ledger_charge(struct ledger_handle *h, unsigned dev, uint64_t bytes, int force);
void ledger_credit(struct ledger_handle *h, unsigned dev, uint64_t bytes);
/* The same, with the lock already held. */
void ledger_credit_locked(struct ledger_handle *h, unsigned dev, uint64_t bytes);

/* Used bytes of a device, read without the lock. */
static inline uint64_t ledger_used(const struct ledger *l, unsigned dev)
{
    return __atomic_load_n(&l->devices[dev].used, __ATOMIC_RELAXED);
}

#endif
