/* The cross-process state file (CGPU_SIM_STATE), shared by both libraries. */
#include "sim_common.h"
#include "cgpu_procstat.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* /proc/<pid>/stat: state (field 3) and starttime (field 22).  0 if unreadable. */
static int proc_stat(int pid, char *state, unsigned long long *start_time)
{
    unsigned long flags;
    return cgpu_pid_stat(pid, state, &flags, start_time);
}

unsigned long long sim_proc_start_time(int pid)
{
    char state;
    unsigned long long start = 0;
    return proc_stat(pid, &state, &start) ? start : 0;
}

/* Alive, not a zombie, and (when known) the same process that took the slot. */
int sim_pid_alive(int pid, unsigned long long start_time)
{
    if (pid <= 0)
        return 0;
    char state;
    unsigned long long start;
    /* /proc first: slots hold the pid /proc shows (the host's, as NVML reports it), which a
     * process in a child pid namespace cannot kill() but can find in the host's /proc. */
    if (!proc_stat(pid, &state, &start)) /* gone, or a /proc of another pid namespace */
        return !(kill(pid, 0) != 0 && errno == ESRCH);
    if (state == 'Z' || state == 'X')
        return 0;
    if (start_time && start != start_time)
        return 0; /* the pid was reused */
    return 1;
}

static int init_mutex(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    int r = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return r;
}

int sim_tl_dev_init(struct sim_tl_dev *d)
{
    return init_mutex(&d->mu);
}

/* A state file of another layout (an older simulator's, or not one at all): no simulator of
 * this release can share it, so it is replaced by a fresh one, under its lock.  Processes that
 * still map the old file keep it and no longer meet the new ones.  Once only: a file that is
 * replaced again under our feet is refused. */
static struct sim_state *replaced(const char *path, int fd, void *map, size_t size)
{
    static _Thread_local int depth;
    fprintf(stderr, "cgpu-sim: " CGPU_ENV_SIM_STATE ": %s is of another simulator's layout; starting a new one\n", path);
    if (map)
        munmap(map, size);
    int gone = depth == 0 && unlink(path) == 0;
    flock(fd, LOCK_UN);
    close(fd);
    if (!gone)
        return NULL;
    depth++;
    struct sim_state *st = sim_state_open(path);
    depth--;
    return st;
}

struct sim_state *sim_state_open(const char *path)
{
    const size_t size = sizeof(struct sim_state_file);
    int created = 0;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        created = fd >= 0;
    }
    if (fd < 0) {
        fprintf(stderr, "cgpu-sim: " CGPU_ENV_SIM_STATE ": cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    if (created)
        (void)fchmod(fd, 0666); /* shared by every user of the simulator */
    if (flock(fd, LOCK_EX) != 0) {
        fprintf(stderr, "cgpu-sim: " CGPU_ENV_SIM_STATE ": cannot lock %s: %s\n", path, strerror(errno));
        close(fd);
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        goto io_error;
    int fresh = sb.st_size == 0;
    if (!fresh && (size_t)sb.st_size != size)
        return replaced(path, fd, NULL, 0);
    if (fresh && ftruncate(fd, (off_t)size) != 0)
        goto io_error;
    struct sim_state_file *f = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (f == MAP_FAILED)
        goto io_error;
    if (fresh || f->magic == 0) {
        memset(f, 0, sizeof *f - sizeof f->slots);
        f->version = SIM_STATE_VERSION;
        f->header_size = (unsigned)offsetof(struct sim_state_file, slots);
        f->slot_size = (unsigned)sizeof(struct sim_state_slot);
        f->ndevices_max = SIM_STATE_DEVICES;
        f->nslots = SIM_STATE_SLOTS;
        init_mutex(&f->lock);
        for (int d = 0; d < SIM_STATE_DEVICES; d++)
            sim_tl_dev_init(&f->dev[d]);
        __atomic_store_n(&f->magic, SIM_STATE_MAGIC, __ATOMIC_RELEASE);
    } else if (f->magic != SIM_STATE_MAGIC || f->version != SIM_STATE_VERSION ||
               f->slot_size != sizeof(struct sim_state_slot) || f->nslots != SIM_STATE_SLOTS) {
        return replaced(path, fd, f, size);
    }
    flock(fd, LOCK_UN);
    close(fd);
    struct sim_state *st = calloc(1, sizeof *st);
    if (!st) {
        munmap(f, size);
        return NULL;
    }
    st->f = f;
    return st;

io_error:
    fprintf(stderr, "cgpu-sim: " CGPU_ENV_SIM_STATE ": %s: %s\n", path, strerror(errno));
    flock(fd, LOCK_UN);
    close(fd);
    return NULL;
}

void sim_state_lock(struct sim_state *st)
{
    int r = pthread_mutex_lock(&st->f->lock);
    if (r == EOWNERDEAD)
        pthread_mutex_consistent(&st->f->lock);
}

void sim_state_unlock(struct sim_state *st)
{
    pthread_mutex_unlock(&st->f->lock);
}

int sim_state_device(struct sim_state *st, const char *uuid)
{
    struct sim_state_file *f = st->f;
    int found = -1;
    sim_state_lock(st);
    unsigned n = atomic_load(&f->ndevices);
    for (unsigned i = 0; i < n && i < SIM_STATE_DEVICES; i++)
        if (!strcasecmp(f->uuid[i], uuid)) {
            found = (int)i;
            break;
        }
    if (found < 0 && n < SIM_STATE_DEVICES) {
        snprintf(f->uuid[n], SIM_UUID_LEN, "%s", uuid);
        atomic_store(&f->ndevices, n + 1);
        found = (int)n;
    }
    sim_state_unlock(st);
    return found;
}

int sim_state_claim(struct sim_state *st)
{
    struct sim_state_file *f = st->f;
    int me = sim_host_pid(), slot = -1;
    unsigned long long start = sim_proc_start_time(me);
    sim_state_lock(st);
    unsigned hw = atomic_load(&f->high_water);
    for (unsigned i = 0; i < SIM_STATE_SLOTS; i++) {
        struct sim_state_slot *s = &f->slots[i];
        int pid = atomic_load(&s->pid);
        if (i >= hw || pid == 0 || pid == me || !sim_pid_alive(pid, atomic_load(&s->start_time))) {
            /* pid == me: a slot left by an earlier exec of this process image. */
            slot = (int)i;
            break;
        }
    }
    if (slot >= 0) {
        struct sim_state_slot *s = &f->slots[slot];
        atomic_store(&s->pid, 0);
        for (int d = 0; d < SIM_STATE_DEVICES; d++) {
            atomic_store(&s->used[d], 0);
            atomic_store(&s->contexts[d], 0);
            atomic_store(&s->busy[d], 0);
        }
        for (int t = 0; t < SIM_SLOT_TL; t++) {
            atomic_store(&s->tl_dev[t], 0);
            memset(&s->work[t], 0, sizeof s->work[t]);
            for (int b = 0; b < SIM_TL_BUCKETS; b++)
                atomic_store_explicit(&s->tl[t].b[b], 0, memory_order_relaxed);
        }
        atomic_store(&s->start_time, start);
        atomic_store(&s->pid, me);
        if ((unsigned)slot >= hw)
            atomic_store(&f->high_water, (unsigned)slot + 1);
        st->self_pid = getpid(); /* (fork detection compares it with getpid()) */
    }
    sim_state_unlock(st);
    return slot;
}

unsigned long long sim_state_used(struct sim_state *st, int sdev)
{
    struct sim_state_file *f = st->f;
    unsigned long long total = 0;
    unsigned hw = atomic_load(&f->high_water);
    for (unsigned i = 0; i < hw && i < SIM_STATE_SLOTS; i++) {
        struct sim_state_slot *s = &f->slots[i];
        unsigned long long u = atomic_load(&s->used[sdev]);
        if (!u)
            continue;
        int pid = atomic_load(&s->pid);
        if ((st->self_pid && pid == sim_host_pid()) || sim_pid_alive(pid, atomic_load(&s->start_time)))
            total += u;
    }
    return total;
}

int sim_state_procs(struct sim_state *st, int sdev, struct sim_proc_usage *out, int max)
{
    struct sim_state_file *f = st->f;
    int n = 0;
    unsigned hw = atomic_load(&f->high_water);
    for (unsigned i = 0; i < hw && i < SIM_STATE_SLOTS; i++) {
        struct sim_state_slot *s = &f->slots[i];
        unsigned long long u = atomic_load(&s->used[sdev]);
        unsigned c = atomic_load(&s->contexts[sdev]);
        int pid = atomic_load(&s->pid);
        if ((!u && !c) || !sim_pid_alive(pid, atomic_load(&s->start_time)))
            continue;
        if (n < max) {
            out[n].pid = pid;
            out[n].used = u;
        }
        n++;
    }
    return n;
}
