/* CGPU_SIM_* environment parsing, shared by both simulated libraries. */
#include "sim_common.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERR(var, ...)                                              \
    do {                                                           \
        fprintf(stderr, "cgpu-sim: " var ": " __VA_ARGS__);        \
        fputc('\n', stderr);                                       \
        return -1;                                                 \
    } while (0)

static const char *skip_ws(const char *s)
{
    while (*s && isspace((unsigned char)*s))
        s++;
    return s;
}

int sim_parse_size(const char *s, unsigned long long *out)
{
    if (!s)
        return -1;
    s = skip_ws(s);
    if (!isdigit((unsigned char)*s))
        return -1;
    unsigned long long v = 0;
    while (isdigit((unsigned char)*s)) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (~0ULL - d) / 10)
            return -1;
        v = v * 10 + d;
        s++;
    }
    s = skip_ws(s);
    unsigned shift = 0;
    switch (*s) {
    case 'k': case 'K': shift = 10; s++; break;
    case 'm': case 'M': shift = 20; s++; break;
    case 'g': case 'G': shift = 30; s++; break;
    case 't': case 'T': shift = 40; s++; break;
    default: break;
    }
    if (shift && (*s == 'i' || *s == 'I')) {
        s++;
        if (*s != 'B' && *s != 'b')
            return -1;
        s++;
    } else if (!shift && (*s == 'B' || *s == 'b')) {
        s++;
    }
    s = skip_ws(s);
    if (*s)
        return -1;
    if (shift && v > (~0ULL >> shift))
        return -1;
    *out = v << shift;
    return 0;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int sim_parse_uuid(const char *s, unsigned char bytes[16])
{
    static const int groups[5] = {8, 4, 4, 4, 12};
    if (strncmp(s, "GPU-", 4) != 0)
        return -1;
    s += 4;
    int n = 0;
    for (int g = 0; g < 5; g++) {
        if (g && *s++ != '-')
            return -1;
        for (int i = 0; i < groups[g]; i += 2) {
            int hi = hexval(s[0]), lo = hi < 0 ? -1 : hexval(s[1]);
            if (hi < 0 || lo < 0)
                return -1;
            bytes[n++] = (unsigned char)(hi << 4 | lo);
            s += 2;
        }
    }
    return *s ? -1 : 0;
}

int sim_parse_busid(const char *s, unsigned *domain, unsigned *bus, unsigned *device)
{
    unsigned long f[3];
    int n = 0;
    const char *p = skip_ws(s);
    for (;;) {
        char *end;
        if (!isxdigit((unsigned char)*p))
            return -1;
        errno = 0;
        unsigned long v = strtoul(p, &end, 16);
        if (errno || n == 3)
            return -1;
        f[n++] = v;
        p = end;
        if (*p == ':') {
            p++;
            continue;
        }
        break;
    }
    if (*p == '.') {
        p++;
        if (!isxdigit((unsigned char)*p))
            return -1;
        while (isxdigit((unsigned char)*p))
            p++;
    }
    if (*skip_ws(p))
        return -1;
    if (n == 3) {
        *domain = (unsigned)f[0];
        *bus = (unsigned)f[1];
        *device = (unsigned)f[2];
    } else if (n == 2) {
        *domain = 0;
        *bus = (unsigned)f[0];
        *device = (unsigned)f[1];
    } else {
        return -1;
    }
    return 0;
}

/* Split a comma list into at most SIM_MAX_DEVICES items (copied into buf).
 * Returns the number of items or -1 (empty item or too many). */
static int split_list(const char *s, char items[SIM_MAX_DEVICES][SIM_PATH_LEN])
{
    int n = 0;
    const char *p = s;
    for (;;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        while (len && isspace((unsigned char)*p)) {
            p++;
            len--;
        }
        while (len && isspace((unsigned char)p[len - 1]))
            len--;
        if (!len || n == SIM_MAX_DEVICES || len >= SIM_PATH_LEN)
            return -1;
        memcpy(items[n], p, len);
        items[n][len] = 0;
        n++;
        if (!c)
            return n;
        p = c + 1;
    }
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    s = skip_ws(s);
    if (!*s || !(isdigit((unsigned char)*s) || *s == '-'))
        return -1;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *skip_ws(end) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* Duration variable `var`, ns in [lo, hi], into *out (left at its default when unset); -1,
 * with a line naming the variable and `what` it sets, when malformed. */
static int env_ns(const char *var, const char *what, long lo, long hi, unsigned long long *out)
{
    const char *v = getenv(var);
    long ns;
    if (!v)
        return 0;
    if (parse_int(v, lo, hi, &ns)) {
        fprintf(stderr, "cgpu-sim: %s: invalid %s '%s' (%ld..%ld ns)\n", var, what, v, lo, hi);
        return -1;
    }
    *out = (unsigned long long)ns;
    return 0;
}

/* A driver release as NVIDIA numbers them: a branch of 3 digits, then one or two
 * more numbers ("535.261.03", "580.65.06", "550.54"). */
static int parse_release(const char *s)
{
    int parts = 0;
    const char *p = s;
    while (parts < 3) {
        const char *start = p;
        while (*p >= '0' && *p <= '9')
            p++;
        long n = p - start;
        if (n < 1 || (parts == 0 && n != 3) || n > 5)
            return -1;
        parts++;
        if (*p != '.')
            break;
        p++;
    }
    return *p || parts < 2 ? -1 : 0;
}

/* The driver NVIDIA's CUDA toolkit of that version ships with: the release of the
 * newest toolkit at or before the CUDA version. */
static const char *default_release(int cuda_version)
{
    static const struct {
        int cuda;
        const char *release;
    } bundled[] = {
        {11000, "450.51.06"}, {11010, "455.32.00"}, {11020, "460.32.03"}, {11030, "465.19.01"},
        {11040, "470.57.02"}, {11050, "495.29.05"}, {11060, "510.39.01"}, {11070, "515.43.04"},
        {11080, "520.61.05"}, {12000, "525.60.13"}, {12010, "530.30.02"}, {12020, "535.54.03"},
        {12030, "545.23.06"}, {12040, "550.54.14"}, {12050, "555.42.02"}, {12060, "560.28.03"},
        {12080, "570.86.10"}, {12090, "575.51.03"}, {13000, "580.65.06"},
    };
    const char *r = bundled[0].release;
    for (size_t k = 0; k < sizeof bundled / sizeof bundled[0]; k++)
        if (bundled[k].cuda <= cuda_version)
            r = bundled[k].release;
    return r;
}

/* Scratch for split_list: sim_config_load runs under each library's init lock. */
static char (*list_buf(void))[SIM_PATH_LEN]
{
    static char items[SIM_MAX_DEVICES][SIM_PATH_LEN];
    return items;
}

/* A per-device size list: 1 item (applies to all) or exactly ndev items. */
static int size_list(const char *var, const char *val, int ndev, unsigned long long *out)
{
    char (*items)[SIM_PATH_LEN] = list_buf();
    int n = split_list(val, items);
    if (n < 0) {
        fprintf(stderr, "cgpu-sim: %s: malformed list '%s'\n", var, val);
        return -1;
    }
    if (n != 1 && n != ndev) {
        fprintf(stderr, "cgpu-sim: %s: %d values for %d devices (give 1 or %d)\n", var, n, ndev,
                ndev);
        return -1;
    }
    for (int i = 0; i < ndev; i++) {
        const char *item = items[n == 1 ? 0 : i];
        if (sim_parse_size(item, &out[i])) {
            fprintf(stderr,
                    "cgpu-sim: %s: invalid size '%s' (bytes, or a K/KiB/M/MiB/G/GiB suffix)\n",
                    var, item);
            return -1;
        }
    }
    return 0;
}

static int list_len(const char *val)
{
    if (!val)
        return 0;
    int n = 1;
    for (; *val; val++)
        n += *val == ',';
    return n;
}

int sim_config_load(struct sim_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    const char *v;

    const char *mem = getenv(CGPU_ENV_SIM_MEMORY);
    const char *uuids = getenv(CGPU_ENV_SIM_UUIDS);
    const char *other = getenv(CGPU_ENV_SIM_OTHER_USED);

    if ((v = getenv(CGPU_ENV_SIM_DEVICES))) {
        long n;
        if (parse_int(v, 0, SIM_MAX_DEVICES, &n))
            ERR(CGPU_ENV_SIM_DEVICES, "invalid device count '%s' (0..%d)", v, SIM_MAX_DEVICES);
        cfg->ndev = (int)n;
    } else {
        /* Unset: as many devices as the longest per-device list, else 1. */
        int n = 1;
        if (list_len(mem) > n) n = list_len(mem);
        if (list_len(uuids) > n) n = list_len(uuids);
        if (list_len(other) > n) n = list_len(other);
        cfg->ndev = n > SIM_MAX_DEVICES ? SIM_MAX_DEVICES + 1 : n;
        if (cfg->ndev > SIM_MAX_DEVICES)
            ERR(CGPU_ENV_SIM_DEVICES, "more than %d devices listed", SIM_MAX_DEVICES);
    }
    int ndev = cfg->ndev;

    if (mem && ndev) {
        if (size_list(CGPU_ENV_SIM_MEMORY, mem, ndev, cfg->memory))
            return -1;
        for (int i = 0; i < ndev; i++)
            if (!cfg->memory[i])
                ERR(CGPU_ENV_SIM_MEMORY, "device memory must be > 0 ('%s')", mem);
    } else {
        for (int i = 0; i < ndev; i++)
            cfg->memory[i] = 16ULL << 30;
    }

    if (other && ndev) {
        if (size_list(CGPU_ENV_SIM_OTHER_USED, other, ndev, cfg->other_used))
            return -1;
        for (int i = 0; i < ndev; i++)
            if (cfg->other_used[i] > cfg->memory[i])
                ERR(CGPU_ENV_SIM_OTHER_USED, "device %d: %llu bytes used by others exceeds its %llu bytes",
                    i, cfg->other_used[i], cfg->memory[i]);
    }

    if (uuids && ndev) {
        char (*items)[SIM_PATH_LEN] = list_buf();
        int n = split_list(uuids, items);
        if (n < 0)
            ERR(CGPU_ENV_SIM_UUIDS, "malformed list '%s'", uuids);
        if (n != ndev)
            ERR(CGPU_ENV_SIM_UUIDS, "%d UUIDs for %d devices", n, ndev);
        for (int i = 0; i < ndev; i++) {
            if (sim_parse_uuid(items[i], cfg->uuid_bytes[i]))
                ERR(CGPU_ENV_SIM_UUIDS,
                    "invalid UUID '%s' (expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", items[i]);
            for (int j = 0; j < i; j++)
                if (!memcmp(cfg->uuid_bytes[i], cfg->uuid_bytes[j], 16))
                    ERR(CGPU_ENV_SIM_UUIDS, "duplicate UUID '%s'", items[i]);
        }
    } else {
        for (int i = 0; i < ndev; i++) {
            char buf[SIM_UUID_LEN];
            snprintf(buf, sizeof buf, "GPU-5eed0000-0000-4000-8000-%012x", (unsigned)i);
            sim_parse_uuid(buf, cfg->uuid_bytes[i]);
        }
    }
    for (int i = 0; i < ndev; i++) {
        const unsigned char *b = cfg->uuid_bytes[i];
        snprintf(cfg->uuid[i], SIM_UUID_LEN,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
                 b[15]);
    }

    if ((v = getenv(CGPU_ENV_SIM_NAME))) {
        if (!*v || strlen(v) >= SIM_NAME_LEN)
            ERR(CGPU_ENV_SIM_NAME, "name must be 1..%d characters", SIM_NAME_LEN - 1);
        strcpy(cfg->name, v);
    } else {
        strcpy(cfg->name, "cgpu Simulated GPU");
    }

    if ((v = getenv(CGPU_ENV_SIM_CTX_OVERHEAD))) {
        if (sim_parse_size(v, &cfg->ctx_overhead))
            ERR(CGPU_ENV_SIM_CTX_OVERHEAD, "invalid size '%s'", v);
    }

    cfg->granularity = 2ULL << 20;
    if ((v = getenv(CGPU_ENV_SIM_GRANULARITY))) {
        unsigned long long g;
        if (sim_parse_size(v, &g) || !g || (g & (g - 1)))
            ERR(CGPU_ENV_SIM_GRANULARITY, "invalid granularity '%s' (a power of two, bytes or suffix)", v);
        cfg->granularity = g;
    }

    cfg->driver_version = 13000;
    if ((v = getenv(CGPU_ENV_SIM_DRIVER_VERSION))) {
        long dv;
        if (parse_int(v, 1000, 999990, &dv))
            ERR(CGPU_ENV_SIM_DRIVER_VERSION, "invalid version '%s' (e.g. 12040 for CUDA 12.4)", v);
        cfg->driver_version = (int)dv;
    }

    if ((v = getenv(CGPU_ENV_SIM_DRIVER_RELEASE))) {
        if (parse_release(v))
            ERR(CGPU_ENV_SIM_DRIVER_RELEASE, "invalid release '%s' (e.g. 535.261.03 or 580.65.06)", v);
        strcpy(cfg->driver_release, v);
    } else {
        strcpy(cfg->driver_release, default_release(cfg->driver_version));
    }

    if ((v = getenv(CGPU_ENV_SIM_FAULTS))) {
        if (!*v || strlen(v) >= SIM_PATH_LEN)
            ERR(CGPU_ENV_SIM_FAULTS, "invalid path '%s'", v);
        strcpy(cfg->faults, v);
    }
    if ((v = getenv(CGPU_ENV_SIM_STATE))) {
        if (!*v || strlen(v) >= SIM_PATH_LEN)
            ERR(CGPU_ENV_SIM_STATE, "invalid path '%s'", v);
        strcpy(cfg->state, v);
    }

    if (env_ns(CGPU_ENV_SIM_KERNEL_NS, "duration", 0, (long)SIM_TL_MAX_KERNEL_NS, &cfg->kernel_ns))
        return -1;
    cfg->timeslice_ns = 10000000;
    if (env_ns(CGPU_ENV_SIM_TIMESLICE_NS, "time slice", 0, 1000000000L, &cfg->timeslice_ns))
        return -1;
    /* The context timeslice and switch cost: native/sim/README.md, "Time-slicing", has the
     * sources for the defaults. */
    cfg->slice_ns = 2000000;
    if (env_ns(CGPU_ENV_SIM_SLICE_NS, "timeslice", 1000, 1000000000L, &cfg->slice_ns))
        return -1;
    cfg->switch_ns = 50000;
    if (env_ns(CGPU_ENV_SIM_SWITCH_NS, "context switch", 0, 100000000L, &cfg->switch_ns))
        return -1;
    cfg->util_period_ns = 166666667;
    if (env_ns(CGPU_ENV_SIM_UTIL_PERIOD_NS, "period", 10000000L, 10000000000L, &cfg->util_period_ns))
        return -1;
    cfg->util_exact = 0;
    if ((v = getenv(CGPU_ENV_SIM_UTIL_ATTRIBUTION))) {
        if (strcmp(v, "exact") == 0)
            cfg->util_exact = 1;
        else if (strcmp(v, "sampled") != 0)
            ERR(CGPU_ENV_SIM_UTIL_ATTRIBUTION, "invalid attribution '%s' (sampled or exact)", v);
    }
    cfg->queue_depth = 1024;
    if ((v = getenv(CGPU_ENV_SIM_QUEUE_DEPTH))) {
        long q;
        if (parse_int(v, 1, 65536, &q))
            ERR(CGPU_ENV_SIM_QUEUE_DEPTH, "invalid depth '%s' (1..65536)", v);
        cfg->queue_depth = (unsigned)q;
    }
    return 0;
}
