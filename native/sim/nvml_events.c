/* The simulated NVML (libnvidia-ml.so.1).  Events: XIDs from the
 * CGPU_SIM_FAULTS file. */
#include "nvml_sim.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct pending {
    int dev;
    unsigned long long xid;
};

struct nvmlEventSet_st {
    unsigned int magic;
    pthread_mutex_t mu;
    unsigned long long types[SIM_MAX_DEVICES];   /* registered event types */
    long long reg_off[SIM_MAX_DEVICES];          /* file offset at registration */
    long long cursor;                            /* how far the file has been read */
    struct pending *queue;
    size_t nq, capq;
};

#define SET_MAGIC 0x65767365u

static long long faults_size(void)
{
    struct stat sb;
    if (!nvs.cfg.faults[0] || stat(nvs.cfg.faults, &sb) != 0)
        return 0;
    return (long long)sb.st_size;
}

static int valid_set(nvmlEventSet_t set)
{
    return set && set->magic == SET_MAGIC;
}

SIM_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    NEED_DEV(device, i);
    if (!eventTypes)
        return NVML_ERROR_INVALID_ARGUMENT;
    *eventTypes = SUPPORTED_EVENTS;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    NVML_NEED_INIT();
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlEventSet_st *s = calloc(1, sizeof *s);
    if (!s)
        return NVML_ERROR_MEMORY;
    s->magic = SET_MAGIC;
    pthread_mutex_init(&s->mu, NULL);
    s->cursor = faults_size();
    *set = s;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                              nvmlEventSet_t set)
{
    NEED_DEV(device, i);
    if (!valid_set(set))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (eventTypes & ~(unsigned long long)SUPPORTED_EVENTS)
        return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&set->mu);
    if (!set->types[i])
        set->reg_off[i] = faults_size();
    set->types[i] |= eventTypes;
    pthread_mutex_unlock(&set->mu);
    return NVML_SUCCESS;
}

/* "<uuid-or-index> <xid>": the device index, or -1. */
static int parse_fault(char *line, unsigned long long *xid)
{
    char *save = NULL;
    char *who = strtok_r(line, " \t\r", &save);
    char *what = strtok_r(NULL, " \t\r", &save);
    if (!who || !what || *who == '#')
        return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(what, &end, 10);
    if (errno || *end || !isdigit((unsigned char)*what))
        return -1;
    *xid = x;
    if (isdigit((unsigned char)*who)) {
        long idx = strtol(who, &end, 10);
        return *end || idx < 0 || idx >= nvs.cfg.ndev ? -1 : (int)idx;
    }
    for (int i = 0; i < nvs.cfg.ndev; i++)
        if (!strcasecmp(nvs.cfg.uuid[i], who))
            return i;
    return -1;
}

/* Read complete new lines of the faults file into the queue.  set->mu held. */
static void poll_faults(nvmlEventSet_t set)
{
    if (!nvs.cfg.faults[0])
        return;
    int fd = open(nvs.cfg.faults, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return;
    }
    if (sb.st_size < set->cursor) /* truncated or replaced: start over */
        set->cursor = 0;
    while (set->cursor < sb.st_size) {
        char buf[65536];
        ssize_t n = pread(fd, buf, sizeof buf - 1, set->cursor);
        if (n <= 0)
            break;
        buf[n] = 0;
        char *p = buf, *nl;
        while ((nl = memchr(p, '\n', (size_t)(buf + n - p)))) {
            long long line_off = set->cursor + (p - buf);
            *nl = 0;
            unsigned long long xid;
            int dev = parse_fault(p, &xid);
            if (dev >= 0 && (set->types[dev] & nvmlEventTypeXidCriticalError) &&
                line_off >= set->reg_off[dev]) {
                if (set->nq == set->capq) {
                    size_t ncap = set->capq ? set->capq * 2 : 16;
                    struct pending *nqp = realloc(set->queue, ncap * sizeof *nqp);
                    if (nqp) {
                        set->queue = nqp;
                        set->capq = ncap;
                    }
                }
                if (set->nq < set->capq)
                    set->queue[set->nq++] = (struct pending){dev, xid};
            }
            p = nl + 1;
        }
        if (p == buf) {
            if ((size_t)n < sizeof buf - 1)
                break; /* an incomplete last line: wait for the rest */
            p = buf + n; /* a line longer than the buffer: skip it */
        }
        set->cursor += p - buf;
        if (p < buf + n)
            break; /* an incomplete last line: wait for the rest */
    }
    close(fd);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static nvmlReturn_t event_wait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms,
                               int v2)
{
    NVML_NEED_INIT();
    if (!valid_set(set) || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    long long deadline = now_ms() + timeoutms;
    for (;;) {
        pthread_mutex_lock(&set->mu);
        if (!set->nq)
            poll_faults(set);
        if (set->nq) {
            struct pending ev = set->queue[0];
            memmove(&set->queue[0], &set->queue[1], (set->nq - 1) * sizeof *set->queue);
            set->nq--;
            pthread_mutex_unlock(&set->mu);
            data->device = &nvs.devs[ev.dev];
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = ev.xid;
            if (v2) {
                data->gpuInstanceId = NVML_NO_MIG;
                data->computeInstanceId = NVML_NO_MIG;
            }
            return NVML_SUCCESS;
        }
        pthread_mutex_unlock(&set->mu);
        long long left = deadline - now_ms();
        if (left <= 0)
            return NVML_ERROR_TIMEOUT;
        struct timespec ts = {0, (left < 10 ? left : 10) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

SIM_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return event_wait(set, data, timeoutms, 1);
}

SIM_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return event_wait(set, data, timeoutms, 0);
}

SIM_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    NVML_NEED_INIT();
    if (!valid_set(set))
        return NVML_ERROR_INVALID_ARGUMENT;
    set->magic = 0;
    pthread_mutex_destroy(&set->mu);
    free(set->queue);
    free(set);
    return NVML_SUCCESS;
}
