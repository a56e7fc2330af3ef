/* cgpu public C API: the ledger, the container config and sizes, the limit variables.
 *
 * Declared here: a ledger's snapshot (cgpu_ledger_snapshot, in ledger_read.c), the
 * ledger layouts a library knows (cgpu_ledger_layouts) and a ledger's creation
 * (cgpu_ledger_init_file, ledger.c); cgpu.conf and sizes (cgpu_config_load,
 * cgpu_parse_size, config.c); the limit variables (cgpu_request_*, request.c); the
 * text of a result code (cgpu_strerror, errors.c).  The shim (libcgpu.so) and the
 * binding library (libcgpu_ledger.so) are both built from those files.
 *
 * Python reads this header verbatim through cffi (cgpu/core/native.py, ffi.cdef), so
 * it stays plain C declarations: no #include, no #define, no macros, no attributes,
 * and no include guard (C files include it through native/shim/api.h).
 * Test-only entry points live in cgpu_test_api.h and only in the binding library.
 */

/* Limits of one ledger file. */
enum {
    CGPU_MAX_DEVICES = 16,
    CGPU_MAX_SLOTS = 256,
    CGPU_UUID_LEN = 96
};

/* Result codes of the API functions (negative errno-like values). */
enum {
    CGPU_OK = 0,
    CGPU_ERR_IO = -1,        /* open/mmap/read failed; errno says why */
    CGPU_ERR_FOREIGN = -2,   /* wrong magic: not a cgpu ledger */
    CGPU_ERR_VERSION = -3,   /* a cgpu ledger of another layout version */
    CGPU_ERR_TRUNCATED = -4, /* shorter than its header says */
    CGPU_ERR_CORRUPT = -5,   /* header fields out of range */
    CGPU_ERR_FULL = -6,      /* no free device or process slot */
    CGPU_ERR_PARSE = -7,     /* malformed config file or limit variable */
    CGPU_ERR_LIMIT = -8      /* allocation would exceed the slice */
};

/* One device of a container: its slice and its use. */
struct cgpu_device_usage {
    char uuid[96];
    unsigned long long limit;     /* slice in bytes */
    unsigned long long used;      /* bytes charged by live processes */
    unsigned long long peak;      /* highest `used` seen */
    unsigned int processes;       /* live processes with a charge on it */
    unsigned int compute_limit;   /* compute limit, percent of the GPU's time (cgpu.conf first); 0 = none */
    unsigned int compute_policy;  /* CGPU_COMPUTE_* */
    unsigned int compute_used;    /* the container's share of the GPU's time over the last window, in
                                   * hundredths of a percent (0-10000), as its controller measured it */
};

/* One live process of a container. */
struct cgpu_process_usage {
    int pid;                      /* pid in the container's pid namespace */
    unsigned long long start_time;/* /proc/<pid>/stat field 22 */
    unsigned long long used[16];  /* bytes per device index of the ledger */
};

/* A consistent snapshot of one ledger. */
struct cgpu_snapshot {
    unsigned int version;
    unsigned int ndevices;
    unsigned int nprocesses;
    unsigned int dead;            /* slots of dead processes, not counted */
    struct cgpu_device_usage devices[16];
    struct cgpu_process_usage processes[256];
};

/* One device line of a container config file. */
struct cgpu_config_entry {
    char uuid[96];
    unsigned long long limit;
    unsigned int compute;         /* `compute <uuid> <percent> [policy]`: 1-100, 0 = no compute line */
    unsigned int compute_policy;  /* CGPU_COMPUTE_FIXED or CGPU_COMPUTE_SHARE (0 = the default, fixed) */
    unsigned int compute_priority;/* CGPU_COMPUTE_HIGH, _NORMAL or _LOW (0 = the default, normal) */
    unsigned int has_context;     /* 1 where a `context <uuid> <size>` line is present */
    unsigned long long context;   /* what one CUDA context takes on this device, measured on the host */
};

struct cgpu_config {
    unsigned int nentries;
    struct cgpu_config_entry entries[16];
    char error[256];              /* set when loading fails */
};

/* Read `path` (read-only, without its lock) and fill `out` with what its live
 * processes hold; slots of dead processes are left out (and counted in `dead`).
 * Reads every layout from cgpu_ledger_layouts' oldest_read to its writes (out->version
 * says which one the file has).  Returns CGPU_OK or a CGPU_ERR_* code. */
int cgpu_ledger_snapshot(const char *path, struct cgpu_snapshot *out);

/* The ledger layouts this library knows (docs/operations.md, "Upgrading"). */
struct cgpu_layouts {
    unsigned int writes;          /* the layout of the ledgers it creates and charges */
    unsigned int oldest_read;     /* cgpu_ledger_snapshot reads every layout from here to `writes` */
    unsigned int size;            /* bytes of the layout it writes (a header may state more:
                                   * fields a later release appended, which it ignores) */
};
void cgpu_ledger_layouts(struct cgpu_layouts *out);

/* Create (or open, if it exists with the same layout) the ledger at `path`
 * and make sure each device of `entries` is present with its limit, at 0 used
 * for a new device.  Used by the device plugin, the hook and `cgpu run` so that
 * a container is visible before it touches the GPU. */
int cgpu_ledger_init_file(const char *path, const struct cgpu_config *devices);

/* Parse a container config file.  On failure returns CGPU_ERR_PARSE or
 * CGPU_ERR_IO and sets cfg->error to one line naming the file and line. */
int cgpu_config_load(const char *path, struct cgpu_config *cfg);

/* Parse a size: bytes, or with KiB/MiB/GiB/TiB or K/M/G/T (powers of 1024); the
 * suffix is case-sensitive and follows the digits directly, and surrounding
 * whitespace (space, tab, CR, LF) is ignored.
 * Returns 0 and sets *out, or -1 when malformed, zero, or overflowing. */
int cgpu_parse_size(const char *text, unsigned long long *out);

/* A short static description of a CGPU_ERR_* code. */
const char *cgpu_strerror(int code);

/* ---- the limit variables (contract: "The limit: which variables the shim reads") ----
 *
 * One parser for the shim, the OCI hook and the device plugin.  Rules:
 * - CGPU_DISABLE: "true", "1" or "yes" (any case, surrounding whitespace ignored) keeps
 *   the shim out of the way and wins over everything; any other value means "not
 *   disabled".
 * - Every limit variable that is present must be well-formed, even one that a
 *   higher source overrides; a malformed one fails closed.
 * - CGPU_MEM_LIMIT and CGPU_MEM_LIMIT_<i>: a size as cgpu_parse_size reads it, more
 *   than 0.  <i> is a device ordinal 0-15 written without leading zeros; any other
 *   CGPU_MEM_LIMIT_* name is malformed.
 * - ALIYUN_COM_GPU_MEM_CONTAINER over ALIYUN_COM_GPU_MEM_DEV, then
 *   VOLCANO_GPU_ALLOCATED over VOLCANO_GPU_MEMORY_TOTAL: both of a pair or neither,
 *   each a whole number > 0 (digits only, surrounding whitespace ignored), units <= of.
 * - Per device ordinal: CGPU_MEM_LIMIT_<i>, else CGPU_MEM_LIMIT, else the first
 *   share pair present (slice = floor(total * units / of)), else no slice.
 */
enum { CGPU_REQ_NONE = 0, CGPU_REQ_FIXED = 1, CGPU_REQ_SHARE = 2, CGPU_REQ_DISABLED = 3 };

/* Compute limit (contract: "Compute share").  Rules, checked by the same parser:
 * - CGPU_COMPUTE_LIMIT and CGPU_COMPUTE_LIMIT_<i> (i a device ordinal 0-15 without leading
 *   zeros): a whole percent 1-100 of one GPU's compute time, surrounding whitespace ignored,
 *   an optional trailing '%'.  Per ordinal, CGPU_COMPUTE_LIMIT_<i> wins over CGPU_COMPUTE_LIMIT.
 * - CGPU_COMPUTE_POLICY: "fixed" (a hard cap, even on an idle GPU; the default) or "share"
 *   (work-conserving: at least the percent when the container wants it, idle time beyond it),
 *   any case.  Anything else is malformed, even with no compute limit set.
 * - CGPU_COMPUTE_PRIORITY: "high" (the GPU within a quantum of asking, "low" work blocked while
 *   it runs), "normal" (the default) or "low", any case.  Anything else is malformed, even with no
 *   compute limit set.
 * The compute limit does not change the memory slice (kind); a device with a compute limit and
 * no memory slice is tracked at its whole memory. */
enum { CGPU_COMPUTE_DEFAULT = 0, CGPU_COMPUTE_FIXED = 1, CGPU_COMPUTE_SHARE = 2 };
/* A compute priority (0: the default, normal). */
enum { CGPU_COMPUTE_HIGH = 1, CGPU_COMPUTE_NORMAL = 2, CGPU_COMPUTE_LOW = 3 };

struct cgpu_request {
    int kind;                                  /* CGPU_REQ_*: FIXED when any fixed size is set */
    unsigned long long fixed_default;          /* CGPU_MEM_LIMIT, 0 = unset */
    unsigned long long fixed_by_ordinal[16];   /* CGPU_MEM_LIMIT_<i>, 0 = unset */
    unsigned long long units, of;              /* first share pair present, 0 = none */
    unsigned int compute_default;              /* CGPU_COMPUTE_LIMIT, 0 = unset */
    unsigned int compute_by_ordinal[16];       /* CGPU_COMPUTE_LIMIT_<i>, 0 = unset */
    unsigned int compute_policy;               /* CGPU_COMPUTE_FIXED or _SHARE (FIXED when unset) */
    unsigned int compute_priority;             /* CGPU_COMPUTE_HIGH, _NORMAL or _LOW (NORMAL when unset) */
    char variable[64];                         /* on error: the variable at fault */
    char error[256];                           /* on error: one line naming it */
};

/* Parse the limit variables of `envp` (NULL-terminated "NAME=value" strings; the
 * first entry of a name counts, as with getenv).  Returns CGPU_OK, or
 * CGPU_ERR_PARSE with out->variable and out->error set. */
int cgpu_request_from_env(const char *const *envp, struct cgpu_request *out);

/* Whether CGPU_DISABLE in `envp` says true, 1 or yes (any case, surrounding whitespace
 * ignored): the one variable a process reads even where a config file gives its slices. */
int cgpu_request_disabled(const char *const *envp);

/* The slice of device `ordinal` whose memory is `total` bytes: returns 0 and sets
 * *slice, or 1 when the request gives that device no slice. */
int cgpu_request_slice(const struct cgpu_request *req, unsigned int ordinal,
                       unsigned long long total, unsigned long long *slice);

/* The compute limit of device `ordinal` in percent (1-100), or 0 when it has none. */
unsigned int cgpu_request_compute(const struct cgpu_request *req, unsigned int ordinal);
