/* cgpu public C API: the ledger and the container config.
 *
 * This header is the single declaration of what Python reads through cffi
 * (cgpu/ledger.py loads it verbatim with ffi.cdef), so it must stay plain C
 * declarations: no #include, no #define, no macros, no attributes.  The shim
 * (libcgpu.so) and the binding library (libcgpu_ledger.so) are built from the
 * same ledger.c and config.c.
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
    CGPU_ERR_PARSE = -7,     /* malformed config file */
    CGPU_ERR_LIMIT = -8      /* allocation would exceed the slice */
};

/* One device of a container: its slice and its use. */
struct cgpu_device_usage {
    char uuid[96];
    unsigned long long limit;     /* slice in bytes */
    unsigned long long used;      /* bytes charged by live processes */
    unsigned long long peak;      /* highest `used` seen */
    unsigned int processes;       /* live processes with a charge on it */
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
};

struct cgpu_config {
    unsigned int nentries;
    struct cgpu_config_entry entries[16];
    char error[256];              /* set when loading fails */
};

/* Read `path` (read-only, without its lock) and fill `out` with what its live
 * processes hold; slots of dead processes are left out (and counted in `dead`).
 * Returns CGPU_OK or a CGPU_ERR_* code. */
int cgpu_ledger_snapshot(const char *path, struct cgpu_snapshot *out);

/* Create (or open, if it exists with the same layout) the ledger at `path`
 * and make sure each device of `entries` is present with its limit, at 0 used
 * for a new device.  Used by the device plugin, the hook and `cgpu run` so that
 * a container is visible before it touches the GPU. */
int cgpu_ledger_init_file(const char *path, const struct cgpu_config *devices);

/* Parse a container config file.  On failure returns CGPU_ERR_PARSE or
 * CGPU_ERR_IO and sets cfg->error to one line naming the file and line. */
int cgpu_config_load(const char *path, struct cgpu_config *cfg);

/* Parse a size: bytes, or with KiB/MiB/GiB/TiB or K/M/G/T (powers of 1024).
 * Returns 0 and sets *out, or -1 when malformed, zero, or overflowing. */
int cgpu_parse_size(const char *text, unsigned long long *out);

/* Test support: charge or credit `bytes` on device index `dev` for the calling
 * process's slot, exactly as the shim does it.  `sign` is +1 or -1. */
int cgpu_ledger_test_charge(const char *path, unsigned int dev, unsigned long long bytes, int sign);

/* Test support: take the ledger's lock and keep it (until this process dies), to
 * show that readers never hang and that a dead holder's lock is repaired. */
int cgpu_ledger_test_hold_lock(const char *path);

/* A short static description of a CGPU_ERR_* code. */
const char *cgpu_strerror(int code);
