/* The container ledger and the public C API (cgpu_api.h). */
#include "ledger.h"
#include "cgpu_procstat.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

/* ---- process identity ---------------------------------------------------- */

/* Field 22 of /proc/self/stat: start time in clock ticks since boot. */
static uint64_t self_start_time(void)
{
    char state;
    unsigned long long start;
    return cgpu_proc_stat("/proc/self/stat", &state, &start) ? start : 0;
}

/* ---- open / create ------------------------------------------------------- */

static int init_mutex(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    if (pthread_mutexattr_init(&a))
        return -1;
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    int rc = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return rc ? -1 : 0;
}

static int validate(const struct ledger *l, size_t file_size)
{
    if (file_size < sizeof l->magic + sizeof l->version + sizeof l->size)
        return CGPU_ERR_TRUNCATED;
    if (memcmp(l->magic, CGPU_LEDGER_MAGIC_STR, 8) != 0)
        return CGPU_ERR_FOREIGN;
    if (l->version != CGPU_LEDGER_VERSION)
        return CGPU_ERR_VERSION;
    if (file_size < sizeof(struct ledger))
        return CGPU_ERR_TRUNCATED;
    if (l->size != sizeof(struct ledger))
        return CGPU_ERR_CORRUPT;
    if (l->ndevices > CGPU_MAX_DEVICES)
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
    if (init_mutex(&l->lock.mutex)) {
        munmap(l, sizeof *l);
        return CGPU_ERR_IO;
    }
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
    if ((size_t)st.st_size < 16) {
        close(fd);
        return st.st_size == 0 ? CGPU_ERR_TRUNCATED : CGPU_ERR_TRUNCATED;
    }
    size_t map_size = (size_t)st.st_size < sizeof(struct ledger) ? (size_t)st.st_size : sizeof(struct ledger);
    void *m = mmap(NULL, map_size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        close(fd);
        return CGPU_ERR_IO;
    }
    int rc = validate(m, (size_t)st.st_size);
    if (rc != CGPU_OK) {
        munmap(m, map_size);
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

/* ---- locking and repair -------------------------------------------------- */

/* Recompute every device total from the slots: the slots are the truth. */
static void repair(struct ledger *l)
{
    unsigned active = 0;
    for (unsigned s = 0; s < CGPU_MAX_SLOTS; s++)
        active += l->slots[s].in_use != 0;
    __atomic_store_n(&l->active, active, __ATOMIC_RELAXED);
    for (unsigned d = 0; d < l->ndevices; d++) {
        uint64_t sum = 0;
        for (unsigned s = 0; s < CGPU_MAX_SLOTS; s++)
            if (l->slots[s].in_use)
                sum += l->slots[s].used[d];
        __atomic_store_n(&l->devices[d].used, sum, __ATOMIC_RELAXED);
    }
}

void ledger_lock(struct ledger *l)
{
    int rc = pthread_mutex_lock(&l->lock.mutex);
    if (rc == EOWNERDEAD) {
        repair(l);
        pthread_mutex_consistent(&l->lock.mutex);
    }
}

void ledger_unlock(struct ledger *l)
{
    pthread_mutex_unlock(&l->lock.mutex);
}

/* ---- devices --------------------------------------------------------------- */

/* UUIDs are equal when their text is, or when only the kind prefix differs: CUDA
 * gives a MIG instance's UUID as bytes, which we print as "GPU-…", NVML as "MIG-…". */
static int same_uuid(const char *a, const char *b)
{
    if (strncmp(a, b, CGPU_UUID_LEN) == 0)
        return 1;
    const char *da = strchr(a, '-'), *db = strchr(b, '-');
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

/* Whether every device of `cfg` is already there with its limit (read without the lock). */
static int devices_present(const struct ledger *l, const struct cgpu_config *cfg)
{
    for (unsigned i = 0; i < cfg->nentries; i++) {
        int d = ledger_find_device(l, cfg->entries[i].uuid);
        if (d < 0 || __atomic_load_n(&l->devices[d].limit, __ATOMIC_RELAXED) != cfg->entries[i].limit)
            return 0;
    }
    return 1;
}

int ledger_ensure_devices(struct ledger_handle *h, const struct cgpu_config *cfg)
{
    struct ledger *l = h->l;
    int rc = CGPU_OK;
    if (devices_present(l, cfg))
        return CGPU_OK; /* the common case for every process after the first */
    ledger_lock(l);
    for (unsigned i = 0; i < cfg->nentries; i++) {
        int d = ledger_find_device(l, cfg->entries[i].uuid);
        if (d >= 0) {
            __atomic_store_n(&l->devices[d].limit, cfg->entries[i].limit, __ATOMIC_RELAXED);
            continue;
        }
        if (l->ndevices >= CGPU_MAX_DEVICES) {
            rc = CGPU_ERR_FULL;
            break;
        }
        struct ledger_device *dev = &l->devices[l->ndevices];
        memset(dev, 0, sizeof *dev);
        snprintf(dev->uuid, sizeof dev->uuid, "%s", cfg->entries[i].uuid);
        dev->limit = cfg->entries[i].limit;
        __atomic_store_n(&l->ndevices, l->ndevices + 1, __ATOMIC_RELEASE);
    }
    ledger_unlock(l);
    return rc;
}

/* ---- process slots --------------------------------------------------------- */

/* Open-file-description locks: owned by the open file, so closing another fd
 * of the same file in this process does not drop them, and F_OFD_GETLK sees
 * them from any other open file, this process's included. */
static int liveness_lock(int fd, unsigned slot, short type, int cmd, struct flock *out)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET,
                       .l_start = (off_t)(CGPU_LIVENESS_BASE + slot), .l_len = 1, .l_pid = 0};
    int rc = fcntl(fd, cmd, &fl);
    if (out)
        *out = fl;
    return rc;
}

/* Whether the slot's owner is gone: nobody else holds its liveness lock. */
static int slot_is_dead(const struct ledger_handle *h, unsigned s)
{
    if ((int)s == __atomic_load_n(&h->slot, __ATOMIC_RELAXED))
        return 0;
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    if (liveness_lock(h->fd, s, F_WRLCK, F_OFD_GETLK, &fl) != 0)
        return 0; /* cannot tell: keep it */
    return fl.l_type == F_UNLCK;
}

int ledger_claim_slot(struct ledger_handle *h)
{
    struct ledger *l = h->l;
    uint64_t start = self_start_time();
    for (int attempt = 0; attempt < 2; attempt++) {
        ledger_lock(l);
        for (unsigned s = 0; s < CGPU_MAX_SLOTS; s++) {
            struct ledger_slot *slot = &l->slots[s];
            if (slot->in_use)
                continue;
            if (liveness_lock(h->fd, s, F_WRLCK, F_OFD_SETLK, NULL) != 0)
                continue; /* someone still holds it (a claim in flight elsewhere) */
            memset(slot->used, 0, sizeof slot->used);
            slot->pid = (int32_t)getpid();
            slot->start_time = start;
            __atomic_store_n(&slot->in_use, 1, __ATOMIC_RELEASE);
            __atomic_store_n(&h->slot, (int)s, __ATOMIC_RELAXED);
            repair(l); /* cheap, off the hot path: any drift heals at every start */
            ledger_unlock(l);
            return CGPU_OK;
        }
        ledger_unlock(l);
        if (ledger_sweep(h) == 0)
            break;
    }
    return CGPU_ERR_FULL;
}

/* Return a slot's charges and free it.  Caller holds the lock. */
static void free_slot(struct ledger *l, struct ledger_slot *slot)
{
    for (unsigned d = 0; d < l->ndevices; d++) {
        uint64_t u = l->devices[d].used, v = slot->used[d];
        __atomic_store_n(&l->devices[d].used, u >= v ? u - v : 0, __ATOMIC_RELAXED);
    }
    memset(slot->used, 0, sizeof slot->used);
    __atomic_store_n(&slot->in_use, 0, __ATOMIC_RELEASE);
    if (l->active)
        __atomic_store_n(&l->active, l->active - 1, __ATOMIC_RELAXED);
}

unsigned ledger_sweep(struct ledger_handle *h)
{
    struct ledger *l = h->l;
    unsigned dead[CGPU_MAX_SLOTS], n = 0, freed = 0;
    /* The liveness test is a syscall per slot: do it outside the lock. */
    for (unsigned s = 0; s < CGPU_MAX_SLOTS; s++)
        if (__atomic_load_n(&l->slots[s].in_use, __ATOMIC_ACQUIRE) && slot_is_dead(h, s))
            dead[n++] = s;
    if (n == 0 || !h->writable)
        return 0;
    ledger_lock(l);
    for (unsigned i = 0; i < n; i++) {
        struct ledger_slot *slot = &l->slots[dead[i]];
        if (!slot->in_use || !slot_is_dead(h, dead[i]))
            continue; /* reclaimed or re-claimed meanwhile */
        free_slot(l, slot);
        freed++;
    }
    repair(l);
    ledger_unlock(l);
    return freed;
}

void ledger_release_slot(struct ledger_handle *h)
{
    if (!h->l)
        return;
    ledger_lock(h->l);
    int slot = __atomic_load_n(&h->slot, __ATOMIC_RELAXED);
    if (slot >= 0) {
        free_slot(h->l, &h->l->slots[slot]);
        __atomic_store_n(&h->slot, -1, __ATOMIC_RELAXED); /* under the lock: charges see it */
    }
    ledger_unlock(h->l);
    if (slot >= 0)
        liveness_lock(h->fd, (unsigned)slot, F_UNLCK, F_OFD_SETLK, NULL);
}

/* ---- charge / credit -------------------------------------------------------- */

int ledger_charge(struct ledger_handle *h, unsigned dev, uint64_t bytes, int force)
{
    struct ledger *l = h->l;
    struct ledger_device *d = &l->devices[dev];
    ledger_lock(l);
    int slot = __atomic_load_n(&h->slot, __ATOMIC_RELAXED);
    if (slot < 0) { /* the slot was given back (exit): nothing may be charged any more */
        ledger_unlock(l);
        return CGPU_ERR_FULL;
    }
    uint64_t used = d->used;
    if (!force && (bytes > d->limit || used > d->limit - bytes)) {
        ledger_unlock(l);
        return CGPU_ERR_LIMIT;
    }
    __atomic_store_n(&d->used, used + bytes, __ATOMIC_RELAXED);
    l->slots[slot].used[dev] += bytes;
    if (used + bytes > d->peak)
        d->peak = used + bytes;
    ledger_unlock(l);
    return CGPU_OK;
}

void ledger_credit_locked(struct ledger_handle *h, unsigned dev, uint64_t bytes)
{
    struct ledger *l = h->l;
    int slot = __atomic_load_n(&h->slot, __ATOMIC_RELAXED);
    if (slot < 0)
        return; /* the slot was given back at exit already */
    uint64_t *mine = &l->slots[slot].used[dev];
    if (bytes > *mine)
        bytes = *mine; /* never credit what this process did not charge */
    *mine -= bytes;
    __atomic_store_n(&l->devices[dev].used, l->devices[dev].used - bytes, __ATOMIC_RELAXED);
}

void ledger_credit(struct ledger_handle *h, unsigned dev, uint64_t bytes)
{
    ledger_lock(h->l);
    ledger_credit_locked(h, dev, bytes);
    ledger_unlock(h->l);
}

/* ---- public API for readers (cffi) ----------------------------------------- */

API const char *cgpu_strerror(int code)
{
    switch (code) {
    case CGPU_OK: return "ok";
    case CGPU_ERR_IO: return "cannot open or map the file";
    case CGPU_ERR_FOREIGN: return "not a cgpu ledger (bad magic)";
    case CGPU_ERR_VERSION: return "cgpu ledger of an unsupported layout version";
    case CGPU_ERR_TRUNCATED: return "truncated ledger";
    case CGPU_ERR_CORRUPT: return "corrupt ledger header";
    case CGPU_ERR_FULL: return "no free device or process slot";
    case CGPU_ERR_PARSE: return "malformed config";
    case CGPU_ERR_LIMIT: return "over the slice";
    default: return "unknown error";
    }
}

API int cgpu_ledger_snapshot(const char *path, struct cgpu_snapshot *out)
{
    struct ledger_handle h;
    memset(out, 0, sizeof *out);
    int rc = ledger_open(path, LEDGER_READ, &h);
    if (rc != CGPU_OK)
        return rc;
    /* Readers never take the lock: a stopped holder cannot hang them, and a robust
     * mutex must not be shared with processes of another pid namespace (the kernel
     * matches owner thread ids numerically).  Every field read is an aligned word;
     * a slot counts only while its owner holds its liveness lock. */
    struct ledger *l = h.l;
    out->version = l->version;
    out->ndevices = __atomic_load_n(&l->ndevices, __ATOMIC_ACQUIRE);
    if (out->ndevices > CGPU_MAX_DEVICES)
        out->ndevices = CGPU_MAX_DEVICES;
    for (unsigned d = 0; d < out->ndevices; d++) {
        memcpy(out->devices[d].uuid, l->devices[d].uuid, CGPU_UUID_LEN);
        out->devices[d].uuid[CGPU_UUID_LEN - 1] = 0;
        out->devices[d].limit = __atomic_load_n(&l->devices[d].limit, __ATOMIC_RELAXED);
        out->devices[d].peak = __atomic_load_n(&l->devices[d].peak, __ATOMIC_RELAXED);
    }
    for (unsigned s = 0; s < CGPU_MAX_SLOTS; s++) {
        const struct ledger_slot *slot = &l->slots[s];
        if (!__atomic_load_n(&slot->in_use, __ATOMIC_ACQUIRE))
            continue;
        if (slot_is_dead(&h, s)) {
            out->dead++; /* freed by the container's next process that needs it */
            continue;
        }
        struct cgpu_process_usage *p = &out->processes[out->nprocesses++];
        p->pid = slot->pid;
        p->start_time = slot->start_time;
        for (unsigned d = 0; d < out->ndevices; d++) {
            p->used[d] = __atomic_load_n(&slot->used[d], __ATOMIC_RELAXED);
            out->devices[d].used += p->used[d];
            if (p->used[d])
                out->devices[d].processes++;
        }
    }
    ledger_close(&h);
    return CGPU_OK;
}

API int cgpu_ledger_init_file(const char *path, const struct cgpu_config *devices)
{
    struct ledger_handle h;
    int rc = ledger_open(path, LEDGER_CREATE, &h);
    if (rc != CGPU_OK)
        return rc;
    rc = ledger_ensure_devices(&h, devices);
    ledger_close(&h);
    return rc;
}
