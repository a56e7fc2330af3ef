/* The container ledger: open, lock, devices, process slots, charge and credit.
 * What is trusted and what is not: see ledger.h. */
#include "ledger.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cgpu_procstat.h"


/* ---- open / create ------------------------------------------------------- */

/* Check a header read with pread (never through the mapping: the file may shrink). */
static int validate_header(int fd, size_t file_size)
{
    struct {
        char magic[8];
        uint32_t version, size, ndevices;
    } head;
    if (file_size < 16 || pread(fd, &head, sizeof head, 0) != (ssize_t)sizeof head)
        return CGPU_ERR_TRUNCATED;
    if (memcmp(head.magic, CGPU_LEDGER_MAGIC_STR, 8) != 0)
        return CGPU_ERR_FOREIGN;
    if (head.version != CGPU_LEDGER_VERSION)
        return CGPU_ERR_VERSION;
    if (file_size < sizeof(struct ledger))
        return CGPU_ERR_TRUNCATED;
    /* A later release may have appended fields (ledger.h): we use what we know. */
    if (head.size < sizeof(struct ledger) || head.size > CGPU_LEDGER_MAX_SIZE || head.ndevices > CGPU_MAX_DEVICES)
        return CGPU_ERR_CORRUPT;
    return CGPU_OK;
}

/* Initialise a new file under an exclusive flock so two creators cannot race. */
static int initialise(int fd)
{
    struct ledger *l = mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (l == MAP_FAILED)
        return CGPU_ERR_IO;
    memset(l, 0, sizeof *l);
    for (unsigned d = 0; d < CGPU_MAX_DEVICES; d++)
        l->devices[d].used_check = ~0ULL;
    l->version = CGPU_LEDGER_VERSION;
    l->size = sizeof *l;
    uint64_t magic;
    memcpy(&magic, CGPU_LEDGER_MAGIC_STR, 8);
    __atomic_store_n((uint64_t *)(void *)l->magic, magic, __ATOMIC_RELEASE); /* last: a whole header */
    munmap(l, sizeof *l);
    return CGPU_OK;
}

/* A file whose creator died between ftruncate and writing the magic. */
static int never_initialised(int fd)
{
    char magic[8];
    static const char zero[8];
    return pread(fd, magic, sizeof magic, 0) == (ssize_t)sizeof magic && memcmp(magic, zero, 8) == 0;
}

int ledger_open(const char *path, int mode, struct ledger_handle *h)
{
    int create = mode == LEDGER_CREATE;
    memset(h, 0, sizeof *h);
    h->fd = -1;
    h->slot = -1;
    /* Never follow a symlink, never block on a FIFO: the directory may be a container's. */
    const int flags = O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
    int writable = mode != LEDGER_READ;
    int fd = open(path, (writable ? O_RDWR : O_RDONLY) | flags | (create ? O_CREAT : 0), 0666);
    if (fd < 0)
        return CGPU_ERR_IO;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = EINVAL;
        return CGPU_ERR_IO;
    }
    if (create && ((size_t)st.st_size < sizeof(struct ledger) || never_initialised(fd))) {
        flock(fd, LOCK_EX);
        if (fstat(fd, &st) == 0 && (st.st_size == 0 || never_initialised(fd))) {
            int rc = ftruncate(fd, sizeof(struct ledger)) == 0 ? initialise(fd) : CGPU_ERR_IO;
            if (rc != CGPU_OK) {
                flock(fd, LOCK_UN);
                close(fd);
                return rc;
            }
            st.st_size = sizeof(struct ledger);
        }
        flock(fd, LOCK_UN);
    }
    int rc = validate_header(fd, (size_t)st.st_size);
    /* A writer touches the header, its device and its slot at once: map the pages in one go
     * rather than a fault each (the file is 40 KB). */
    void *m = rc == CGPU_OK ? mmap(NULL, sizeof(struct ledger), PROT_READ | (writable ? PROT_WRITE : 0),
                                   MAP_SHARED | (writable ? MAP_POPULATE : 0), fd, 0)
                            : MAP_FAILED;
    if (rc == CGPU_OK && m == MAP_FAILED)
        rc = CGPU_ERR_IO;
    if (rc != CGPU_OK) {
        close(fd);
        return rc;
    }
    h->l = m;
    h->fd = fd;
    h->writable = writable;
    return CGPU_OK;
}

void ledger_close(struct ledger_handle *h)
{
    if (h->l)
        munmap(h->l, sizeof(struct ledger));
    if (h->fd >= 0)
        close(h->fd);
    h->l = NULL;
    h->fd = -1;
    h->slot = -1;
}

/* ---- liveness ---------------------------------------------------------------- */

/* Open-file-description locks: owned by the open file, so closing another fd
 * of the same file in this process does not drop them, and F_OFD_GETLK sees
 * them from any other open file, this process's included. */
static int ofd_lock(int fd, uint64_t byte, short type, int cmd, struct flock *out)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = (off_t)byte, .l_len = 1, .l_pid = 0};
    int rc = fcntl(fd, cmd, &fl);
    if (out)
        *out = fl;
    return rc;
}

/* Whether nobody holds `byte` (tested from our own open file: our locks never count). */
static int byte_free(int fd, uint64_t byte)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    if (ofd_lock(fd, byte, F_WRLCK, F_OFD_GETLK, &fl) != 0)
        return 0; /* cannot tell: not free */
    return fl.l_type == F_UNLCK;
}

/* Whether the process that claimed `slot` is still on its way out: its files (its
 * liveness lock with them) are closed, but it is not yet a zombie, so the driver may
 * still hold its memory.  Only a process that is exiting (PF_EXITING, set before its
 * files close) counts: one with the slot's pid and start time that is not exiting has
 * exec'd a new image (the driver freed the old one's memory, and close-on-exec dropped
 * the liveness lock), or is a new process that got a reused pid within the same clock
 * tick.  A pid of another pid namespace names another process, whose start time differs. */
static int still_exiting(const struct ledger_slot *slot)
{
    char state;
    unsigned long flags;
    unsigned long long start;
    int pid = __atomic_load_n(&slot->pid, __ATOMIC_RELAXED);
    if (pid <= 0)
        return 0;
    return cgpu_pid_stat(pid, &state, &flags, &start) &&
           start == __atomic_load_n(&slot->start_time, __ATOMIC_RELAXED) && state != 'Z' && state != 'X' &&
           (flags & CGPU_PF_EXITING);
}

/* Whether slot `s`'s owner is gone: nobody else holds its liveness lock, and (for a
 * handle that maps the file: the container's processes, which free slots) its process
 * has finished exiting. */
int ledger_slot_is_dead(const struct ledger_handle *h, unsigned s)
{
    if ((int)s == __atomic_load_n(&h->slot, __ATOMIC_RELAXED))
        return 0;
    return byte_free(h->fd, CGPU_LIVENESS_BASE + s) && !(h->l && still_exiting(&h->l->slots[s]));
}

/* ---- the lock ------------------------------------------------------------------ */

/* Lockers without a slot first take the admin byte's OFD lock (namespace-proof, and
 * dropped by the kernel when they die); threads of one process take turns on it. */
static pthread_mutex_t admin_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t claim_mutex = PTHREAD_MUTEX_INITIALIZER; /* threads of one process claim one slot */
static _Thread_local int admin_here;  /* this thread holds the admin byte */
static int admin_process;             /* some thread of this process holds it */

void ledger_admin_enter(struct ledger_handle *h)
{
    pthread_mutex_lock(&admin_mutex);
    while (ofd_lock(h->fd, CGPU_ADMIN_BYTE, F_WRLCK, F_OFD_SETLKW, NULL) != 0 && errno == EINTR)
        ;
    admin_here = 1;
    __atomic_store_n(&admin_process, 1, __ATOMIC_RELAXED);
}

void ledger_admin_leave(struct ledger_handle *h)
{
    admin_here = 0;
    __atomic_store_n(&admin_process, 0, __ATOMIC_RELAXED);
    ofd_lock(h->fd, CGPU_ADMIN_BYTE, F_UNLCK, F_OFD_SETLK, NULL);
    pthread_mutex_unlock(&admin_mutex);
}

/* A private section's lock for a locker without a slot: out of line, off the hot path. */
void ledger_lock_as_admin(struct ledger_handle *h)
{
    ledger_lock(h);
}

void ledger_unlock_as_admin(struct ledger_handle *h)
{
    ledger_unlock(h);
}

/* Whether the owner in lock word `word` is gone. */
static int owner_dead(const struct ledger_handle *h, uint32_t word)
{
    uint32_t owner = word & LOCK_OWNER;
    if (owner == LOCK_ADMIN) {
        if (admin_here)
            return 1; /* we hold the admin byte, so whoever held it before us is gone */
        if (__atomic_load_n(&admin_process, __ATOMIC_RELAXED))
            return 0; /* another thread of ours */
        return byte_free(h->fd, CGPU_ADMIN_BYTE);
    }
    if (owner == 0 || owner > CGPU_MAX_SLOTS)
        return 1; /* not a word a locker writes */
    return ledger_slot_is_dead(h, owner - 1);
}

static void repair(struct ledger *l);

static void futex_wait(uint32_t *word, uint32_t expected, long ns)
{
    struct timespec ts = {0, ns};
    syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

void ledger_lock_slow(struct ledger_handle *h, uint32_t mine)
{
    struct ledger *l = h->l;
    uint32_t waited = 0;
    for (unsigned spin = 0;; spin++) {
        uint32_t cur = __atomic_load_n(&l->lock, __ATOMIC_RELAXED);
        if (cur == 0) {
            if (__atomic_compare_exchange_n(&l->lock, &cur, mine | waited, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
                return;
            continue;
        }
        if (spin < 64) {
            sched_yield();
            continue;
        }
        if (!(cur & LOCK_WAITERS)) {
            if (!__atomic_compare_exchange_n(&l->lock, &cur, cur | LOCK_WAITERS, 0, __ATOMIC_RELAXED,
                                             __ATOMIC_RELAXED))
                continue;
            cur |= LOCK_WAITERS;
        }
        futex_wait(&l->lock, cur, 2000000); /* 2 ms, then look at the owner */
        waited = LOCK_WAITERS;
        if (__atomic_load_n(&l->lock, __ATOMIC_RELAXED) == cur && owner_dead(h, cur) &&
            __atomic_compare_exchange_n(&l->lock, &cur, mine | LOCK_WAITERS, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED)) {
            ledger_write_begin(l); /* its own write section: a table-only locker opens none */
            repair(l);             /* the owner died inside: the slots are the truth */
            ledger_write_end(l);
            return;
        }
    }
}

int ledger_trylock(struct ledger_handle *h)
{
    struct ledger *l = h->l;
    int slot = __atomic_load_n(&h->slot, __ATOMIC_RELAXED);
    if (slot < 0)
        return 0; /* views without a slot never lock */
    uint32_t seq = __atomic_load_n(&l->lock_seq, __ATOMIC_RELAXED) + 1;
    uint32_t mine = ((uint32_t)slot + 1) | ((seq << 9) & LOCK_SEQ), expected = 0;
    if (!__atomic_compare_exchange_n(&l->lock, &expected, mine, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return 0;
    __atomic_store_n(&l->lock_seq, seq, __ATOMIC_RELAXED);
    ledger_write_begin(l);
    return 1;
}

void ledger_wake(struct ledger *l)
{
    syscall(SYS_futex, &l->lock, FUTEX_WAKE, 1, NULL, NULL, 0);
}

void ledger_forget_process(void)
{
    pthread_mutex_init(&admin_mutex, NULL);
    pthread_mutex_init(&claim_mutex, NULL);
    admin_here = 0;
    admin_process = 0;
}

/* ---- totals ------------------------------------------------------------------- */

/* Recompute every device total from the slots in use.  Caller holds the lock. */
static void repair(struct ledger *l)
{
    unsigned active = 0;
    if (l->ndevices > CGPU_MAX_DEVICES)
        l->ndevices = CGPU_MAX_DEVICES;
    for (unsigned s = 0; s < CGPU_MAX_SLOTS; s++)
        active += l->slots[s].in_use != 0;
    __atomic_store_n(&l->active, active, __ATOMIC_RELAXED);
    for (unsigned d = 0; d < CGPU_MAX_DEVICES; d++) {
        uint64_t sum = 0;
        for (unsigned s = 0; s < CGPU_MAX_SLOTS; s++)
            if (l->slots[s].in_use && __builtin_add_overflow(sum, l->slots[s].used[d], &sum))
                sum = UINT64_MAX;
        ledger_set_used(&l->devices[d], sum);
    }
}

void ledger_heal(struct ledger_handle *h, int slot)
{
    struct ledger_slot *mine = &h->l->slots[slot];
    memcpy(mine->used, h->held, sizeof mine->used);
    if (!mine->in_use) {
        mine->pid = (int32_t)getpid();
        __atomic_store_n(&mine->in_use, 1, __ATOMIC_RELEASE);
    }
    repair(h->l);
}

/* ---- devices --------------------------------------------------------------- */

/* UUIDs are equal when their text is, or when only the kind prefix differs: CUDA
 * gives a MIG instance's UUID as bytes, which we print as "GPU-…", NVML as "MIG-…". */
static int same_uuid(const char *a, const char *b)
{
    if (strncmp(a, b, CGPU_UUID_LEN) == 0)
        return 1;
    const char *da = memchr(a, '-', CGPU_UUID_LEN), *db = strchr(b, '-');
    return da && db && da - a == 3 && db - b == 3 && strncmp(da, db, CGPU_UUID_LEN - 3) == 0;
}

int ledger_find_device(const struct ledger *l, const char *uuid)
{
    unsigned n = __atomic_load_n(&l->ndevices, __ATOMIC_ACQUIRE);
    for (unsigned d = 0; d < n && d < CGPU_MAX_DEVICES; d++)
        if (same_uuid(l->devices[d].uuid, uuid))
            return (int)d;
    return -1;
}

/* Take `cfg`'s compute limits as ours, and show them to readers (no lock: advisory words). */
static void take_compute(struct ledger_handle *h, const struct cgpu_config *cfg)
{
    for (unsigned i = 0; i < cfg->nentries && i < CGPU_MAX_DEVICES; i++) {
        int d = ledger_find_device(h->l, cfg->entries[i].uuid);
        if (d < 0)
            continue;
        unsigned pol = cfg->entries[i].compute_policy ? cfg->entries[i].compute_policy : CGPU_COMPUTE_FIXED;
        h->compute[d] = cfg->entries[i].compute;
        h->policy[d] = pol;
        if (h->writable) {
            __atomic_store_n(&h->l->compute[d].limit, cfg->entries[i].compute, __ATOMIC_RELAXED);
            __atomic_store_n(&h->l->compute[d].policy, pol, __ATOMIC_RELAXED);
        }
    }
}

/* Take `cfg`'s limits as ours when every device is there already; 1 if so.  The
 * file's copies are refreshed only if the lock is free (a view never waits). */
static int devices_present(struct ledger_handle *h, const struct cgpu_config *cfg)
{
    int d[CGPU_MAX_DEVICES], stale = 0;
    for (unsigned i = 0; i < cfg->nentries && i < CGPU_MAX_DEVICES; i++) {
        if ((d[i] = ledger_find_device(h->l, cfg->entries[i].uuid)) < 0)
            return 0;
        stale |= __atomic_load_n(&h->l->devices[d[i]].limit, __ATOMIC_RELAXED) != cfg->entries[i].limit;
    }
    for (unsigned i = 0; i < cfg->nentries && i < CGPU_MAX_DEVICES; i++)
        h->limit[d[i]] = cfg->entries[i].limit;
    if (stale && h->slot >= 0 && ledger_trylock(h)) {
        for (unsigned i = 0; i < cfg->nentries && i < CGPU_MAX_DEVICES; i++)
            __atomic_store_n(&h->l->devices[d[i]].limit, cfg->entries[i].limit, __ATOMIC_RELAXED);
        ledger_unlock(h);
    }
    return !stale || h->slot >= 0;
}

int ledger_ensure_devices(struct ledger_handle *h, const struct cgpu_config *cfg)
{
    struct ledger *l = h->l;
    int rc = CGPU_OK;
    if (devices_present(h, cfg)) {
        take_compute(h, cfg);
        return CGPU_OK; /* every process after the first, with no lock taken */
    }
    ledger_lock(h);
    for (unsigned i = 0; i < cfg->nentries && i < CGPU_MAX_DEVICES; i++) {
        int d = ledger_find_device(l, cfg->entries[i].uuid);
        if (d < 0) {
            if (l->ndevices >= CGPU_MAX_DEVICES) {
                rc = CGPU_ERR_FULL;
                break;
            }
            d = (int)l->ndevices;
            struct ledger_device *dev = &l->devices[d];
            memset(dev, 0, sizeof *dev);
            snprintf(dev->uuid, sizeof dev->uuid, "%.95s", cfg->entries[i].uuid);
            ledger_set_used(dev, 0);
            __atomic_store_n(&l->ndevices, l->ndevices + 1, __ATOMIC_RELEASE);
        }
        /* Ours from here on; the file's copy is for readers (and heals a tampered one). */
        h->limit[d] = cfg->entries[i].limit;
        __atomic_store_n(&l->devices[d].limit, cfg->entries[i].limit, __ATOMIC_RELAXED);
    }
    ledger_unlock(h);
    take_compute(h, cfg);
    return rc;
}

/* ---- process slots --------------------------------------------------------- */

static uint64_t self_start_time(void)
{
    char state;
    unsigned long long start;
    return cgpu_self_stat(&state, &start) ? start : 0;
}

/* Free the slots that carry our pid but whose liveness lock nobody holds: our own
 * previous image (exec keeps the pid and start time; the driver freed its memory and
 * close-on-exec dropped its lock), or a dead holder of our reused pid.  A process never
 * sees either's memory.  Caller holds the lock; 1 if any was freed. */
static int free_previous_images(struct ledger_handle *h, int32_t pid)
{
    struct ledger *l = h->l;
    int freed = 0;
    for (unsigned s = 0; s < CGPU_MAX_SLOTS; s++) {
        struct ledger_slot *slot = &l->slots[s];
        if (!slot->in_use || slot->pid != pid || !ledger_slot_is_dead(h, s))
            continue;
        memset(slot->used, 0, sizeof slot->used);
        __atomic_store_n(&slot->in_use, 0, __ATOMIC_RELEASE);
        freed = 1;
    }
    return freed;
}

/* Take slot `s` if it is free: its liveness lock arbitrates between claimers (whoever holds
 * it owns the slot), and a sweeper never touches a slot that is not in use.  A free slot's
 * charges were zeroed when it was freed, so no total changes: no lock, no repair (totals are
 * checked against their check words at every charge and view, and repaired when they differ). */
static int take_free_slot(struct ledger_handle *h, unsigned s, uint64_t start)
{
    struct ledger_slot *slot = &h->l->slots[s];
    if (__atomic_load_n(&slot->in_use, __ATOMIC_ACQUIRE))
        return 0;
    if (ofd_lock(h->fd, CGPU_LIVENESS_BASE + s, F_WRLCK, F_OFD_SETLK, NULL) != 0)
        return 0; /* another claimer has it */
    uint32_t free_word = 0;
    if (!__atomic_load_n(&slot->in_use, __ATOMIC_ACQUIRE)) {
        for (unsigned d = 0; d < CGPU_MAX_DEVICES; d++) /* what a container may have written */
            __atomic_store_n(&slot->used[d], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&slot->pid, (int32_t)getpid(), __ATOMIC_RELAXED);
        __atomic_store_n(&slot->start_time, start, __ATOMIC_RELAXED);
        if (__atomic_compare_exchange_n(&slot->in_use, &free_word, 1, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
            __atomic_fetch_add(&h->l->active, 1, __ATOMIC_RELAXED);
            memset(h->held, 0, sizeof h->held);
            __atomic_store_n(&h->slot, (int)s, __ATOMIC_RELEASE);
            return 1;
        }
    }
    ofd_lock(h->fd, CGPU_LIVENESS_BASE + s, F_UNLCK, F_OFD_SETLK, NULL);
    return 0;
}

int ledger_claim_slot(struct ledger_handle *h)
{
    struct ledger *l = h->l;
    uint64_t start = self_start_time();
    int32_t pid = (int32_t)getpid();
    int rc = CGPU_ERR_FULL;
    pthread_mutex_lock(&claim_mutex);
    /* A sweep that frees nothing may have lost to another claimer's sweep, whose freed slots
     * the next scan finds: the ledger is full only when sweeps twice find nothing. */
    for (int attempt = 0, idle = 0; attempt < 64 && rc != CGPU_OK; attempt++) {
        if (__atomic_load_n(&h->slot, __ATOMIC_RELAXED) >= 0) { /* another thread of ours claimed it */
            rc = CGPU_OK;
            break;
        }
        for (unsigned s = 0; s < CGPU_MAX_SLOTS && rc != CGPU_OK; s++)
            if (take_free_slot(h, s, start))
                rc = CGPU_OK;
        if (rc != CGPU_OK && ledger_sweep(h) == 0 && ++idle == 2)
            break;
    }
    if (rc == CGPU_OK) {
        /* Our previous image, or a dead holder of our pid: freed before we look at anything. */
        int ours = 0;
        for (unsigned s = 0; s < CGPU_MAX_SLOTS && !ours; s++)
            ours = (int)s != h->slot && __atomic_load_n(&l->slots[s].in_use, __ATOMIC_ACQUIRE) &&
                   __atomic_load_n(&l->slots[s].pid, __ATOMIC_RELAXED) == pid;
        if (ours) {
            ledger_lock(h);
            if (free_previous_images(h, pid))
                repair(l);
            ledger_unlock(h);
        }
    }
    pthread_mutex_unlock(&claim_mutex);
    return rc;
}

/* Return a slot's charges and free it.  Caller holds the lock. */
static void free_slot(struct ledger *l, struct ledger_slot *slot)
{
    memset(slot->used, 0, sizeof slot->used);
    __atomic_store_n(&slot->in_use, 0, __ATOMIC_RELEASE);
    repair(l);
}

static unsigned sweep(struct ledger_handle *h, int wait)
{
    struct ledger *l = h->l;
    unsigned dead[CGPU_MAX_SLOTS], n = 0, freed = 0;
    if (!h->writable)
        return 0;
    /* The liveness test is a syscall per slot: do it outside the lock. */
    for (unsigned s = 0; s < CGPU_MAX_SLOTS; s++)
        if (__atomic_load_n(&l->slots[s].in_use, __ATOMIC_ACQUIRE) && ledger_slot_is_dead(h, s))
            dead[n++] = s;
    if (n == 0)
        return 0;
    if (wait)
        ledger_lock(h);
    else if (!ledger_trylock(h))
        return 0;
    for (unsigned i = 0; i < n; i++) {
        struct ledger_slot *slot = &l->slots[dead[i]];
        if (!slot->in_use || !ledger_slot_is_dead(h, dead[i]))
            continue; /* reclaimed or re-claimed meanwhile */
        memset(slot->used, 0, sizeof slot->used);
        __atomic_store_n(&slot->in_use, 0, __ATOMIC_RELEASE);
        freed++;
    }
    repair(l);
    ledger_unlock(h);
    return freed;
}

unsigned ledger_sweep(struct ledger_handle *h)
{
    return sweep(h, 1);
}

unsigned ledger_try_sweep(struct ledger_handle *h)
{
    return sweep(h, 0);
}

void ledger_release_slot(struct ledger_handle *h)
{
    if (!h->l)
        return;
    int slot = __atomic_load_n(&h->slot, __ATOMIC_RELAXED);
    if (slot < 0)
        return;
    /* What we still hold, the driver frees only once we are gone (when our files close):
     * given back now, it could be charged to another process while we hold it.  Such a
     * slot dies with us, as a killed process's does. */
    for (unsigned d = 0; d < CGPU_MAX_DEVICES; d++)
        if (h->held[d])
            return;
    /* An exit never waits long on another process (it may be stopped inside): after
     * ~20 ms the slot is left to die with us, and the next sweep returns its charges. */
    int locked = 0;
    for (int i = 0; i < 200 && !(locked = ledger_trylock(h)); i++) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    if (!locked)
        return;
    free_slot(h->l, &h->l->slots[slot]);
    memset(h->held, 0, sizeof h->held);
    __atomic_store_n(&h->slot, -1, __ATOMIC_RELAXED); /* under the lock: charges see it */
    ledger_unlock(h);
    ofd_lock(h->fd, CGPU_LIVENESS_BASE + (unsigned)slot, F_UNLCK, F_OFD_SETLK, NULL);
}

/* ---- charge / credit -------------------------------------------------------- */

int ledger_charge_locked(struct ledger_handle *h, unsigned dev, uint64_t bytes, int force)
{
    return ledger_charge_inline(h, dev, bytes, force);
}

int ledger_charge(struct ledger_handle *h, unsigned dev, uint64_t bytes, int force)
{
    ledger_lock(h);
    int rc = ledger_charge_locked(h, dev, bytes, force);
    ledger_unlock(h);
    return rc;
}

void ledger_credit_locked(struct ledger_handle *h, unsigned dev, uint64_t bytes)
{
    ledger_credit_inline(h, dev, bytes);
}

void ledger_credit(struct ledger_handle *h, unsigned dev, uint64_t bytes)
{
    ledger_lock(h);
    ledger_credit_inline(h, dev, bytes);
    ledger_unlock(h);
}

/* Summed over the live slots, without the lock (a liveness test per slot in use). */
uint64_t ledger_live_used(const struct ledger_handle *h, unsigned dev)
{
    uint64_t sum = 0;
    for (unsigned s = 0; s < CGPU_MAX_SLOTS; s++)
        if (__atomic_load_n(&h->l->slots[s].in_use, __ATOMIC_ACQUIRE) && !ledger_slot_is_dead(h, s))
            sum += __atomic_load_n(&h->l->slots[s].used[dev], __ATOMIC_RELAXED);
    return sum;
}

uint64_t ledger_view_used(struct ledger_handle *h, unsigned dev)
{
    struct ledger *l = h->l;
    uint64_t total = ledger_used(l, dev);
    if (likely(total == ~__atomic_load_n(&l->devices[dev].used_check, __ATOMIC_RELAXED)))
        return total;
    /* Changed behind the writers' back: repair it if the lock is free, else count the slots. */
    if (h->writable && __atomic_load_n(&h->slot, __ATOMIC_RELAXED) >= 0 && ledger_trylock(h)) {
        repair(l);
        ledger_unlock(h);
        return ledger_used(l, dev);
    }
    return ledger_live_used(h, dev);
}

/* ---- a new file (the host's side: the device plugin, the hook, `cgpu run`) ---------- */

EXPORT int cgpu_ledger_init_file(const char *path, const struct cgpu_config *devices)
{
    struct ledger_handle h;
    int rc = ledger_open(path, LEDGER_CREATE, &h);
    if (rc != CGPU_OK)
        return rc;
    rc = ledger_ensure_devices(&h, devices);
    ledger_close(&h);
    return rc;
}
