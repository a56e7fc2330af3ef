/* The container config file (cgpu.conf) and sizes.  Depends on nothing else of the shim. */
#ifndef CGPU_CONFIG_H
#define CGPU_CONFIG_H

#include "api.h"
#include "cgpu_macros.h"
#include "cgpu_names.h" /* CGPU_CONFIG_NAME and the keywords */

/* The largest context cost a config may give (a context takes hundreds of MiB). */
#define CGPU_CONFIG_MAX_CONTEXT (1ULL << 30)

/* Parse the text of a config file; `origin` names it in cfg->error. */
int config_parse_text(const char *text, const char *origin, struct cgpu_config *cfg);
/* Write `cfg` as `dir`/cgpu.conf unless one is there already. */
int config_write_atomic(const char *dir, const struct cgpu_config *cfg);
/* Whether `s` is a device UUID we accept: [A-Za-z0-9-]{1,95}. */
int config_uuid_ok(const char *s);
/* CGPU_COMPUTE_FIXED or CGPU_COMPUTE_SHARE for "fixed"/"share" (any case, surrounding
 * whitespace ignored), 0 for anything else. */
unsigned cgpu_compute_policy_parse(const char *text);
/* CGPU_COMPUTE_HIGH, _NORMAL or _LOW for "high"/"normal"/"low" (any case, surrounding
 * whitespace ignored), 0 for anything else. */
unsigned cgpu_compute_priority_parse(const char *text);
/* A whole percent 1-100: digits, an optional '%', surrounding whitespace ignored; 0 or -1. */
int config_parse_percent(const char *text, unsigned *out);

#endif
