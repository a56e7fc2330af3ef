/* Reading a ledger from outside (the exporter, `cgpu ledger`, clean-up): cgpu_ledger_snapshot.
 * It sits above ledger.c and calls down into it, never the other way.  A reader never maps
 * the file and never locks it: it copies the file with pread (a file that shrinks or holds
 * garbage is an error code, never a fault), checks everything, and retries until the copy is
 * one writer-free state. */
#include <fcntl.h>
#include <libgen.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "ledger.h"

#define READ_TRIES 32

/* The layouts a reader reads, oldest first: each one's version and size.  A layout keeps the
 * fields of the one before at the same offsets; what an older one lacks reads as 0. */
static const struct layout {
    uint32_t version;
    uint32_t size;
} layouts[] = {
    {2, CGPU_LEDGER_V2_SIZE}, /* before the compute block */
    {3, sizeof(struct ledger)},
};
_Static_assert(sizeof layouts / sizeof layouts[0] == CGPU_LEDGER_VERSION - CGPU_LEDGER_OLDEST_READ + 1,
               "one row per layout read");

static const struct layout *layout_of(uint32_t version)
{
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        if (layouts[i].version == version)
            return &layouts[i];
    return NULL;
}

EXPORT void cgpu_ledger_layouts(struct cgpu_layouts *out)
{
    out->writes = CGPU_LEDGER_VERSION;
    out->oldest_read = CGPU_LEDGER_OLDEST_READ;
    out->size = sizeof(struct ledger);
}

/* Everything a reader relies on, checked in its private copy of `n` bytes. */
static int validate_copy(const struct ledger *c, ssize_t n)
{
    if (n < 16)
        return CGPU_ERR_TRUNCATED;
    if (memcmp(c->magic, CGPU_LEDGER_MAGIC_STR, 8) != 0)
        return CGPU_ERR_FOREIGN;
    const struct layout *known = layout_of(c->version);
    if (!known)
        return CGPU_ERR_VERSION;
    if ((size_t)n < known->size)
        return CGPU_ERR_TRUNCATED;
    if (c->size < known->size || c->size > CGPU_LEDGER_MAX_SIZE || c->ndevices > CGPU_MAX_DEVICES ||
        c->active > CGPU_MAX_SLOTS)
        return CGPU_ERR_CORRUPT;
    for (unsigned d = 0; d < c->ndevices; d++)
        if (!memchr(c->devices[d].uuid, 0, CGPU_UUID_LEN) || !config_uuid_ok(c->devices[d].uuid))
            return CGPU_ERR_CORRUPT;
    for (unsigned s = 0; s < CGPU_MAX_SLOTS; s++)
        if (c->slots[s].in_use > 1)
            return CGPU_ERR_CORRUPT;
    return CGPU_OK;
}

/* One copy of the file, with the generation read before and after it.  What an older layout
 * lacks is zeroed in the copy (whatever the file holds there belongs to no field of it). */
static int read_once(int fd, struct ledger *copy, uint32_t *before, uint32_t *after)
{
    const off_t gen_at = (off_t)offsetof(struct ledger, gen);
    int gen_ok = pread(fd, before, sizeof *before, gen_at) == (ssize_t)sizeof *before;
    ssize_t n = pread(fd, copy, sizeof *copy, 0);
    if (n < 0)
        return CGPU_ERR_IO;
    gen_ok = gen_ok && pread(fd, after, sizeof *after, gen_at) == (ssize_t)sizeof *after;
    int rc = validate_copy(copy, n);
    if (rc == CGPU_OK) {
        size_t known = layout_of(copy->version)->size;
        memset((char *)copy + known, 0, sizeof *copy - known);
    }
    return rc == CGPU_OK && !gen_ok ? CGPU_ERR_TRUNCATED : rc; /* shrunk meanwhile */
}

/* The slices from the read-only cgpu.conf beside the ledger override the file's own. */
static void slices_from_config(const char *path, const struct ledger *copy, struct cgpu_snapshot *out)
{
    char dir[4096], conf[4200];
    snprintf(dir, sizeof dir, "%s", path);
    snprintf(conf, sizeof conf, "%s/%s", dirname(dir), CGPU_CONFIG_NAME);
    struct cgpu_config cfg;
    if (cgpu_config_load(conf, &cfg) != CGPU_OK)
        return;
    for (unsigned i = 0; i < cfg.nentries; i++) {
        int d = ledger_find_device(copy, cfg.entries[i].uuid);
        if (d >= 0 && (unsigned)d < out->ndevices)
        {
            out->devices[d].limit = cfg.entries[i].limit;
            out->devices[d].compute_limit = cfg.entries[i].compute;
            out->devices[d].compute_policy = cfg.entries[i].compute ? cfg.entries[i].compute_policy : 0;
        }
    }
}

/* A device's total and its check word, read again (they are two stores apart, so a copy taken
 * while a writer was between them holds a torn pair); 1 with *total when they match. */
static int reread_total(int fd, unsigned dev, uint64_t *total)
{
    const off_t at = (off_t)offsetof(struct ledger, devices) + (off_t)dev * (off_t)sizeof(struct ledger_device) +
                     (off_t)offsetof(struct ledger_device, used);
    uint64_t w[3]; /* used, peak, used_check */
    for (int t = 0; t < 8; t++) {
        if (pread(fd, w, sizeof w, at) != (ssize_t)sizeof w)
            return 0;
        if (w[0] == ~w[2]) {
            *total = w[0];
            return 1;
        }
        sched_yield();
    }
    return 0;
}

/* Fill `out` from a validated copy.  `consistent`: the copy is one writer-free
 * state; otherwise each device's total is taken from its (checked) total word,
 * which a writer changes in one store, less what dead slots hold. */
static int fill(const struct ledger_handle *h, const struct ledger *c, int consistent, struct cgpu_snapshot *out)
{
    uint64_t live[CGPU_MAX_DEVICES] = {0}, dead[CGPU_MAX_DEVICES] = {0};
    out->version = c->version;
    out->ndevices = c->ndevices;
    for (unsigned d = 0; d < c->ndevices; d++) {
        memcpy(out->devices[d].uuid, c->devices[d].uuid, CGPU_UUID_LEN);
        out->devices[d].limit = c->devices[d].limit;
        out->devices[d].peak = c->devices[d].peak;
        /* The file's compute words are advisory: shown only when in range. */
        const struct ledger_compute *k = &c->compute[d];
        out->devices[d].compute_limit = k->limit <= 100 ? k->limit : 0;
        out->devices[d].compute_policy = out->devices[d].compute_limit && k->policy <= 2 ? k->policy : 0;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        int fresh = k->beat <= now && now - k->beat < 5000000000ull; /* a stopped controller shows 0 */
        out->devices[d].compute_used = k->used <= 10000 && fresh ? k->used : 0;
    }
    for (unsigned s = 0; s < CGPU_MAX_SLOTS; s++) {
        const struct ledger_slot *slot = &c->slots[s];
        if (!slot->in_use)
            continue;
        int is_dead = ledger_slot_is_dead(h, s);
        struct cgpu_process_usage *p = is_dead ? NULL : &out->processes[out->nprocesses++];
        out->dead += is_dead != 0; /* freed by the container's next process that needs it */
        if (p) {
            p->pid = slot->pid;
            p->start_time = slot->start_time;
        }
        for (unsigned d = 0; d < c->ndevices; d++) {
            uint64_t u = slot->used[d];
            if (__builtin_add_overflow(is_dead ? dead[d] : live[d], u, is_dead ? &dead[d] : &live[d]))
                return CGPU_ERR_CORRUPT;
            if (p) {
                p->used[d] = u;
                out->devices[d].processes += u != 0;
            }
        }
    }
    for (unsigned d = 0; d < c->ndevices; d++) {
        const struct ledger_device *dev = &c->devices[d];
        uint64_t total = dev->used;
        int total_ok = dev->used == ~dev->used_check;
        if (!consistent && !total_ok) /* torn by a writer, or tampered: look again */
            total_ok = reread_total(h->fd, d, &total);
        if (consistent || !total_ok)
            out->devices[d].used = live[d];
        else
            out->devices[d].used = total > dead[d] ? total - dead[d] : 0;
    }
    return CGPU_OK;
}

EXPORT int cgpu_ledger_snapshot(const char *path, struct cgpu_snapshot *out)
{
    memset(out, 0, sizeof *out);
    struct ledger_handle h = {.l = NULL, .fd = -1, .slot = -1};
    h.fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (h.fd < 0)
        return CGPU_ERR_IO;
    struct stat st;
    struct ledger *copy = NULL;
    int rc = fstat(h.fd, &st) == 0 && S_ISREG(st.st_mode) ? CGPU_OK : CGPU_ERR_IO;
    if (rc == CGPU_OK && !(copy = malloc(sizeof *copy)))
        rc = CGPU_ERR_IO;
    int consistent = 0;
    uint32_t before = 0, after = 0, last = 1;
    for (int t = 0; rc == CGPU_OK; t++) {
        rc = read_once(h.fd, copy, &before, &after);
        if (rc != CGPU_OK)
            break;
        if (before == after && !(before & 1u) && copy->gen == before) {
            consistent = 1;
            break;
        }
        /* The same odd generation round after round: a writer stopped or died inside
         * (nobody else can write meanwhile), so the copy is stable. */
        if (before == after && before == last && t >= 4) {
            consistent = 1;
            break;
        }
        if (t >= READ_TRIES)
            break; /* writers too busy: fill() takes each total from one word */
        last = before == after ? before : 1;
        sched_yield();
    }
    if (rc == CGPU_OK)
        rc = fill(&h, copy, consistent, out);
    if (rc == CGPU_OK)
        slices_from_config(path, copy, out);
    else
        memset(out, 0, sizeof *out);
    free(copy);
    close(h.fd);
    return rc;
}
