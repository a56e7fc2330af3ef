/* The one parser of the limit variables (rules in cgpu_api.h, next to
 * struct cgpu_request).  Pure: no getenv, no I/O; the shim passes `environ`,
 * Python passes a mapping through cffi. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "config.h"


static const char FIXED_PREFIX[] = CGPU_ENV_MEM_LIMIT "_";
static const char COMPUTE_PREFIX[] = CGPU_ENV_COMPUTE_LIMIT "_";

static const char *const SHARES[2][2] = {
    {CGPU_ENV_GPU_MEM_CONTAINER, CGPU_ENV_GPU_MEM_DEV},
    {CGPU_ENV_VOLCANO_ALLOCATED, CGPU_ENV_VOLCANO_TOTAL},
};

/* The value of the first "name=" entry, or NULL. */
static const char *lookup(const char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (; envp && *envp; envp++)
        if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
            return *envp + n + 1;
    return NULL;
}

/* Copy at most 40 characters of `value` into `out`, printable ones only, so that
 * an error stays one line whatever the variable holds. */
static void shown(const char *value, char out[48])
{
    size_t i = 0;
    for (; value[i] && i < 40; i++)
        out[i] = value[i] >= 0x20 && value[i] < 0x7f ? value[i] : '?';
    out[i] = 0;
    if (value[i])
        snprintf(out + i, 48 - i, "...");
}

__attribute__((format(printf, 3, 4))) static int fail(struct cgpu_request *out, const char *variable, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->error, sizeof out->error, fmt, ap);
    va_end(ap);
    snprintf(out->variable, sizeof out->variable, "%s", variable);
    return CGPU_ERR_PARSE;
}

/* What surrounds a value harmlessly (cgpu_parse_size skips the same). */
static int blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int is_disable(const char *v)
{
    static const char *const yes[] = {"true", "1", "yes"};
    while (blank(*v))
        v++;
    size_t n = strlen(v);
    while (n && blank(v[n - 1]))
        n--;
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        if (strlen(yes[i]) == n && strncasecmp(v, yes[i], n) == 0)
            return 1;
    return 0;
}

/* A whole number > 0: digits only, surrounding whitespace ignored. */
static int parse_units(const char *v, unsigned long long *out)
{
    while (blank(*v))
        v++;
    if (*v < '0' || *v > '9')
        return -1;
    unsigned long long x = 0;
    for (; *v >= '0' && *v <= '9'; v++) {
        unsigned digit = (unsigned)(*v - '0');
        if (x > (~0ULL - digit) / 10)
            return -1;
        x = x * 10 + digit;
    }
    while (blank(*v))
        v++;
    if (*v || x == 0)
        return -1;
    *out = x;
    return 0;
}

static int size_var(struct cgpu_request *out, const char *name, const char *value, unsigned long long *dst)
{
    char v[48];
    if (cgpu_parse_size(value, dst) == 0)
        return CGPU_OK;
    shown(value, v);
    return fail(out, name, "%s=%s is malformed: expected bytes or a size with KiB/MiB/GiB (or K/M/G)", name, v);
}

static int percent_var(struct cgpu_request *out, const char *name, const char *value, unsigned *dst)
{
    char v[48];
    if (config_parse_percent(value, dst) == 0)
        return CGPU_OK;
    shown(value, v);
    return fail(out, name, "%s=%s is malformed: expected a whole percent from 1 to 100", name, v);
}

/* <prefix><i> entries (CGPU_MEM_LIMIT_<i>, CGPU_COMPUTE_LIMIT_<i>): the ordinal must be 0-15
 * without leading zeros.  `compute` picks the value kind and the field. */
static int by_ordinal(const char *const *envp, struct cgpu_request *out, const char *prefix, int compute)
{
    size_t plen = strlen(prefix);
    for (; envp && *envp; envp++) {
        const char *e = *envp;
        if (strncmp(e, prefix, plen) != 0)
            continue;
        const char *eq = strchr(e, '=');
        if (!eq)
            continue;
        char name[64];
        size_t len = (size_t)(eq - e);
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), e);
        const char *suffix = e + plen;
        size_t digits = (size_t)(eq - suffix);
        unsigned ordinal = 0;
        int ok = digits >= 1 && digits <= 2 && !(digits == 2 && suffix[0] == '0');
        for (size_t i = 0; ok && i < digits; i++) {
            ok = suffix[i] >= '0' && suffix[i] <= '9';
            ordinal = ordinal * 10 + (unsigned)(suffix[i] - '0');
        }
        if (!ok || ordinal >= 16 || len >= sizeof name)
            return fail(out, name, "%s is not a limit variable: the device ordinal must be 0 to 15", name);
        int rc;
        if (compute) {
            if (out->compute_by_ordinal[ordinal])
                continue; /* a repeated name: the first one counts, as with getenv */
            rc = percent_var(out, name, eq + 1, &out->compute_by_ordinal[ordinal]);
        } else {
            if (out->fixed_by_ordinal[ordinal])
                continue;
            rc = size_var(out, name, eq + 1, &out->fixed_by_ordinal[ordinal]);
        }
        if (rc != CGPU_OK)
            return rc;
    }
    return CGPU_OK;
}

/* CGPU_COMPUTE_LIMIT(_<i>), CGPU_COMPUTE_POLICY and CGPU_COMPUTE_PRIORITY. */
static int compute_vars(const char *const *envp, struct cgpu_request *out)
{
    int rc = by_ordinal(envp, out, COMPUTE_PREFIX, 1);
    const char *def = lookup(envp, CGPU_ENV_COMPUTE_LIMIT);
    if (rc == CGPU_OK && def)
        rc = percent_var(out, CGPU_ENV_COMPUTE_LIMIT, def, &out->compute_default);
    const char *pol = lookup(envp, CGPU_ENV_COMPUTE_POLICY);
    out->compute_policy = CGPU_COMPUTE_FIXED;
    if (rc == CGPU_OK && pol) {
        out->compute_policy = cgpu_compute_policy_parse(pol);
        if (!out->compute_policy) {
            char v[48];
            shown(pol, v);
            rc = fail(out, CGPU_ENV_COMPUTE_POLICY, CGPU_ENV_COMPUTE_POLICY "=%s is malformed: expected fixed or share", v);
        }
    }
    const char *pri = lookup(envp, CGPU_ENV_COMPUTE_PRIORITY);
    out->compute_priority = CGPU_COMPUTE_NORMAL;
    if (rc == CGPU_OK && pri) {
        out->compute_priority = cgpu_compute_priority_parse(pri);
        if (!out->compute_priority) {
            char v[48];
            shown(pri, v);
            rc = fail(out, CGPU_ENV_COMPUTE_PRIORITY,
                      CGPU_ENV_COMPUTE_PRIORITY "=%s is malformed: expected high, normal or low", v);
        }
    }
    return rc;
}

static int share_pair(const char *const *envp, const char *const pair[2], struct cgpu_request *out)
{
    const char *part = lookup(envp, pair[0]), *whole = lookup(envp, pair[1]);
    if (!part && !whole)
        return CGPU_OK;
    if (!part || !whole)
        return fail(out, part ? pair[1] : pair[0], "%s is set but %s is not", part ? pair[0] : pair[1],
                    part ? pair[1] : pair[0]);
    unsigned long long p, w;
    char v[48];
    for (int i = 0; i < 2; i++)
        if (parse_units(i ? whole : part, i ? &w : &p) != 0) {
            shown(i ? whole : part, v);
            return fail(out, pair[i], "%s=%s is malformed: expected a positive whole number", pair[i], v);
        }
    if (p > w)
        return fail(out, pair[0], "%s=%llu exceeds %s=%llu", pair[0], p, pair[1], w);
    if (!out->of) {
        out->units = p;
        out->of = w;
    }
    return CGPU_OK;
}

EXPORT int cgpu_request_disabled(const char *const *envp)
{
    const char *disable = lookup(envp, CGPU_ENV_DISABLE);
    return disable && is_disable(disable);
}

EXPORT int cgpu_request_from_env(const char *const *envp, struct cgpu_request *out)
{
    memset(out, 0, sizeof *out);
    if (cgpu_request_disabled(envp)) {
        out->kind = CGPU_REQ_DISABLED;
        return CGPU_OK;
    }
    int rc = by_ordinal(envp, out, FIXED_PREFIX, 0);
    const char *def = lookup(envp, CGPU_ENV_MEM_LIMIT);
    if (rc == CGPU_OK && def)
        rc = size_var(out, CGPU_ENV_MEM_LIMIT, def, &out->fixed_default);
    for (int i = 0; i < 2 && rc == CGPU_OK; i++)
        rc = share_pair(envp, SHARES[i], out);
    if (rc == CGPU_OK)
        rc = compute_vars(envp, out);
    if (rc != CGPU_OK) {
        out->kind = CGPU_REQ_NONE;
        return rc;
    }
    int fixed = out->fixed_default != 0;
    for (int i = 0; i < 16; i++)
        fixed |= out->fixed_by_ordinal[i] != 0;
    out->kind = fixed ? CGPU_REQ_FIXED : out->of ? CGPU_REQ_SHARE : CGPU_REQ_NONE;
    return CGPU_OK;
}

EXPORT int cgpu_request_slice(const struct cgpu_request *req, unsigned int ordinal, unsigned long long total,
                           unsigned long long *slice)
{
    if (req->kind != CGPU_REQ_FIXED && req->kind != CGPU_REQ_SHARE)
        return 1;
    if (ordinal < 16 && req->fixed_by_ordinal[ordinal]) {
        *slice = req->fixed_by_ordinal[ordinal];
        return 0;
    }
    if (req->fixed_default) {
        *slice = req->fixed_default;
        return 0;
    }
    if (!req->of)
        return 1;
    *slice = (unsigned long long)((unsigned __int128)total * req->units / req->of);
    return 0;
}

EXPORT unsigned int cgpu_request_compute(const struct cgpu_request *req, unsigned int ordinal)
{
    if (req->kind == CGPU_REQ_DISABLED)
        return 0;
    if (ordinal < 16 && req->compute_by_ordinal[ordinal])
        return req->compute_by_ordinal[ordinal];
    return req->compute_default;
}
