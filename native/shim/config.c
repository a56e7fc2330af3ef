/* The container config file (cgpu.conf) and sizes: the C side of cgpu.config. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"


EXPORT int cgpu_parse_size(const char *text, unsigned long long *out)
{
    if (!text)
        return -1;
    const char *p = text;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    if (*p < '0' || *p > '9')
        return -1;
    unsigned long long v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (~0ULL - 9) / 10)
            return -1;
        v = v * 10 + (unsigned)(*p - '0');
    }
    static const struct { const char *suffix; unsigned shift; } units[] = {
        {"", 0}, {"B", 0}, {"K", 10}, {"KiB", 10}, {"M", 20}, {"MiB", 20},
        {"G", 30}, {"GiB", 30}, {"T", 40}, {"TiB", 40},
    };
    const char *end = p;
    while (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')
        end++;
    const char *rest = end;
    while (*rest == ' ' || *rest == '\t' || *rest == '\n' || *rest == '\r')
        rest++;
    if (*rest)
        return -1;
    size_t len = (size_t)(end - p);
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strlen(units[i].suffix) == len && strncmp(units[i].suffix, p, len) == 0) {
            if (units[i].shift && v > (~0ULL >> units[i].shift))
                return -1;
            v <<= units[i].shift;
            if (v == 0)
                return -1;
            *out = v;
            return 0;
        }
    }
    return -1;
}

int config_uuid_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= CGPU_UUID_LEN)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-'))
            return 0;
    return 1;
}

static int blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int config_parse_percent(const char *v, unsigned *out)
{
    while (blank(*v))
        v++;
    unsigned x = 0;
    int digits = 0;
    for (; *v >= '0' && *v <= '9' && digits < 4; v++, digits++)
        x = x * 10 + (unsigned)(*v - '0');
    if (*v == '%')
        v++;
    while (blank(*v))
        v++;
    if (!digits || *v || x < 1 || x > 100)
        return -1;
    *out = x;
    return 0;
}

unsigned cgpu_compute_policy_parse(const char *v)
{
    static const char *const names[] = {CGPU_POLICY_FIXED, CGPU_POLICY_SHARE};
    while (blank(*v))
        v++;
    size_t n = strlen(v);
    while (n && blank(v[n - 1]))
        n--;
    for (unsigned i = 0; i < 2; i++)
        if (strlen(names[i]) == n && strncasecmp(v, names[i], n) == 0)
            return i + 1;
    return 0;
}

unsigned cgpu_compute_priority_parse(const char *v)
{
    static const char *const names[] = {CGPU_PRIORITY_HIGH, CGPU_PRIORITY_NORMAL, CGPU_PRIORITY_LOW};
    while (blank(*v))
        v++;
    size_t n = strlen(v);
    while (n && blank(v[n - 1]))
        n--;
    for (unsigned i = 0; i < 3; i++)
        if (strlen(names[i]) == n && strncasecmp(v, names[i], n) == 0)
            return i + 1;
    return 0;
}

/* `compute <uuid> <percent> [fixed|share] [high|normal|low]`: the device must be listed above
 * (a priority needs the policy before it). */
static int compute_line(struct cgpu_config *cfg, const char *origin, int line_no, int n, const char *uuid,
                        const char *percent, const char *policy, const char *priority)
{
    unsigned pct, pol = CGPU_COMPUTE_FIXED, pri = CGPU_COMPUTE_NORMAL;
    struct cgpu_config_entry *e = NULL;
    for (unsigned i = 0; i < cfg->nentries; i++)
        if (strcmp(cfg->entries[i].uuid, uuid) == 0)
            e = &cfg->entries[i];
    if (n < 3 || n > 5 || !e || config_parse_percent(percent, &pct) != 0 ||
        (n >= 4 && !(pol = cgpu_compute_policy_parse(policy))) ||
        (n == 5 && !(pri = cgpu_compute_priority_parse(priority))) || e->compute) {
        snprintf(cfg->error, sizeof cfg->error,
                 "%s:%d: expected 'compute <uuid> <percent 1-100> [fixed|share] [high|normal|low]' once, "
                 "after the device's line",
                 origin, line_no);
        return CGPU_ERR_PARSE;
    }
    e->compute = pct;
    e->compute_policy = pol;
    e->compute_priority = pri;
    return CGPU_OK;
}

/* `context <uuid> <size>`: what one CUDA context takes on a device listed above,
 * measured on the host (0 to 1 GiB; "0" is allowed). */
static int context_line(struct cgpu_config *cfg, const char *origin, int line_no, int n, const char *uuid,
                        const char *size)
{
    struct cgpu_config_entry *e = NULL;
    for (unsigned i = 0; i < cfg->nentries; i++)
        if (strcmp(cfg->entries[i].uuid, uuid) == 0)
            e = &cfg->entries[i];
    unsigned long long bytes = 0;
    if (n != 3 || !e || e->has_context || (strcmp(size, "0") != 0 && cgpu_parse_size(size, &bytes) != 0) ||
        bytes > CGPU_CONFIG_MAX_CONTEXT) {
        snprintf(cfg->error, sizeof cfg->error,
                 "%s:%d: expected 'context <uuid> <size up to 1GiB>' once, after the device's line", origin,
                 line_no);
        return CGPU_ERR_PARSE;
    }
    e->has_context = 1;
    e->context = bytes;
    return CGPU_OK;
}

int config_parse_text(const char *text, const char *origin, struct cgpu_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    int line_no = 0, have_version = 0;
    const char *p = text;
    while (*p) {
        line_no++;
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[256];
        if (len >= sizeof line) {
            snprintf(cfg->error, sizeof cfg->error, "%s:%d: line too long", origin, line_no);
            return CGPU_ERR_PARSE;
        }
        memcpy(line, p, len);
        line[len] = 0;
        p = eol ? eol + 1 : p + len;
        char *s = line;
        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == 0 || *s == '#' || *s == '\r')
            continue;
        /* Each field is read whole or spills into the next, so a field too long for its
         * buffer, or one field too many, makes n larger than any line allows. */
        char kw[16], a[CGPU_UUID_LEN + 8], b[64], extra[8], more[8], rest[8];
        int n = sscanf(s, "%15s %103s %63s %7s %7s %7s", kw, a, b, extra, more, rest);
        if (!have_version) {
            if (n == 2 && strcmp(kw, CGPU_CONF_VERSION) == 0 && strcmp(a, "1") == 0) {
                have_version = 1;
                continue;
            }
            snprintf(cfg->error, sizeof cfg->error, "%s:%d: expected 'version 1' first", origin, line_no);
            return CGPU_ERR_PARSE;
        }
        unsigned long long limit;
        if (n >= 1 && strcmp(kw, CGPU_CONF_CONTEXT) == 0) {
            if (context_line(cfg, origin, line_no, n, a, b) != CGPU_OK)
                return CGPU_ERR_PARSE;
            continue;
        }
        if (n >= 1 && strcmp(kw, CGPU_CONF_COMPUTE) == 0) {
            if (compute_line(cfg, origin, line_no, n, a, b, extra, more) != CGPU_OK)
                return CGPU_ERR_PARSE;
            continue;
        }
        if (n != 3 || strcmp(kw, CGPU_CONF_DEVICE) != 0) {
            snprintf(cfg->error, sizeof cfg->error, "%s:%d: expected 'device <uuid> <size>'", origin, line_no);
            return CGPU_ERR_PARSE;
        }
        if (!config_uuid_ok(a)) {
            snprintf(cfg->error, sizeof cfg->error, "%s:%d: invalid device UUID", origin, line_no);
            return CGPU_ERR_PARSE;
        }
        if (cgpu_parse_size(b, &limit) != 0) {
            snprintf(cfg->error, sizeof cfg->error, "%s:%d: malformed size '%s'", origin, line_no, b);
            return CGPU_ERR_PARSE;
        }
        for (unsigned i = 0; i < cfg->nentries; i++)
            if (strcmp(cfg->entries[i].uuid, a) == 0) {
                snprintf(cfg->error, sizeof cfg->error, "%s:%d: device listed twice", origin, line_no);
                return CGPU_ERR_PARSE;
            }
        if (cfg->nentries >= CGPU_MAX_DEVICES) {
            snprintf(cfg->error, sizeof cfg->error, "%s:%d: more than %d devices", origin, line_no, CGPU_MAX_DEVICES);
            return CGPU_ERR_PARSE;
        }
        snprintf(cfg->entries[cfg->nentries].uuid, CGPU_UUID_LEN, "%.95s", a);
        cfg->entries[cfg->nentries].limit = limit;
        cfg->nentries++;
    }
    if (!have_version || cfg->nentries == 0) {
        snprintf(cfg->error, sizeof cfg->error, "%s: no devices", origin);
        return CGPU_ERR_PARSE;
    }
    return CGPU_OK;
}

EXPORT int cgpu_config_load(const char *path, struct cgpu_config *cfg)
{
    char text[8192];
    memset(cfg, 0, sizeof *cfg);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        snprintf(cfg->error, sizeof cfg->error, "%s: %s", path, strerror(errno));
        return CGPU_ERR_IO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(cfg->error, sizeof cfg->error, "%s: not a regular file", path);
        return CGPU_ERR_PARSE;
    }
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n < 0 || n == (ssize_t)sizeof text - 1) {
        snprintf(cfg->error, sizeof cfg->error, "%s: unreadable or too large", path);
        return n < 0 ? CGPU_ERR_IO : CGPU_ERR_PARSE;
    }
    text[n] = 0;
    if (memchr(text, 0, (size_t)n)) {
        snprintf(cfg->error, sizeof cfg->error, "%s: binary content", path);
        return CGPU_ERR_PARSE;
    }
    return config_parse_text(text, path, cfg);
}

int config_write_atomic(const char *dir, const struct cgpu_config *cfg)
{
    char tmp[4096], final[4096];
    if (snprintf(tmp, sizeof tmp, "%s/.%s.%d", dir, CGPU_CONFIG_NAME, (int)getpid()) >= (int)sizeof tmp ||
        snprintf(final, sizeof final, "%s/%s", dir, CGPU_CONFIG_NAME) >= (int)sizeof final)
        return CGPU_ERR_IO;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return CGPU_ERR_IO;
    char text[4096];
    int len = snprintf(text, sizeof text, "# cgpu container config (written by the shim)\nversion 1\n");
    for (unsigned i = 0; i < cfg->nentries && len < (int)sizeof text; i++)
    {
        len += snprintf(text + len, sizeof text - (size_t)len, "device %s %llu\n", cfg->entries[i].uuid,
                        cfg->entries[i].limit);
        if (cfg->entries[i].compute && len < (int)sizeof text) {
            unsigned pri = cfg->entries[i].compute_priority;
            len += snprintf(text + len, sizeof text - (size_t)len, "compute %s %u %s %s\n", cfg->entries[i].uuid,
                            cfg->entries[i].compute,
                            cfg->entries[i].compute_policy == CGPU_COMPUTE_SHARE ? CGPU_POLICY_SHARE : CGPU_POLICY_FIXED,
                            pri == CGPU_COMPUTE_HIGH  ? CGPU_PRIORITY_HIGH
                            : pri == CGPU_COMPUTE_LOW ? CGPU_PRIORITY_LOW
                                                       : CGPU_PRIORITY_NORMAL);
        }
    }
    int ok = len < (int)sizeof text && write(fd, text, (size_t)len) == len;
    ok = close(fd) == 0 && ok;
    /* link() fails if another process wrote the file first: theirs wins. */
    if (ok && link(tmp, final) != 0)
        ok = errno == EEXIST;
    unlink(tmp);
    return ok ? CGPU_OK : CGPU_ERR_IO;
}

