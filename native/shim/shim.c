/* Working out the slices (contract: "The limit: which variables the shim reads"),
 * opening the container's ledger, and the per-process set-up.  Nothing here is
 * on the allocation hot path. */
#include <cuda.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "shim.h"

struct shim_state g_shim = {.single_device = SHIM_MULTI_DEVICE, .ledger = {.fd = -1, .slot = -1}};

static pthread_mutex_t init_mutex = PTHREAD_MUTEX_INITIALIZER;
static int setup_state = SHIM_UNINIT;
static long long ctx_overhead_env = -1;
/* A context's cost per ledger device, from the host's `context` lines in cgpu.conf (which
 * the container cannot write): where set, it wins over CGPU_CONTEXT_OVERHEAD and nothing
 * is measured. */
static uint64_t ctx_overhead_conf[CGPU_MAX_DEVICES];
static unsigned char ctx_overhead_conf_set[CGPU_MAX_DEVICES];
static uint64_t ctx_used_before[CGPU_MAX_DEVICES];
#define CGPU_MAX_CONTEXT_OVERHEAD CGPU_CONFIG_MAX_CONTEXT


void shim_fail_line(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cgpu: %s; refusing to run without the GPU limits it was given\n", msg);
}

/* ---- device enumeration, through CUDA or NVML ------------------------------- */

struct device_info {
    char uuid[CGPU_UUID_LEN];
    uint64_t total;
};

static void format_uuid(const unsigned char b[16], char out[CGPU_UUID_LEN])
{
    /* "GPU-" and 8-4-4-4-12 hex digits (snprintf with 16 arguments costs a start thousands
     * of instructions). */
    static const char hex[] = "0123456789abcdef";
    char *o = out;
    memcpy(o, "GPU-", 4);
    o += 4;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *o++ = '-';
        *o++ = hex[b[i] >> 4];
        *o++ = hex[b[i] & 15];
    }
    *o = '\0';
}

/* Visible CUDA devices by ordinal; returns the count or -1 if the driver is not ready. */
static int cuda_devices(struct device_info *out, int max)
{
    CUresult (*count_fn)(int *) = (CUresult(*)(int *))shim_driver_sym("cuDeviceGetCount");
    CUresult (*get_fn)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))shim_driver_sym("cuDeviceGet");
    CUresult (*uuid_fn)(CUuuid *, CUdevice) = (CUresult(*)(CUuuid *, CUdevice))shim_driver_sym("cuDeviceGetUuid_v2");
    if (!uuid_fn)
        uuid_fn = (CUresult(*)(CUuuid *, CUdevice))shim_driver_sym("cuDeviceGetUuid");
    CUresult (*total_fn)(size_t *, CUdevice) = (CUresult(*)(size_t *, CUdevice))shim_driver_sym("cuDeviceTotalMem_v2");
    int n = 0;
    if (!count_fn || !get_fn || !uuid_fn || !total_fn || count_fn(&n) != CUDA_SUCCESS)
        return -1;
    if (n > max)
        n = max;
    for (int i = 0; i < n; i++) {
        CUdevice d;
        CUuuid u;
        size_t total = 0;
        if (get_fn(&d, i) != CUDA_SUCCESS || uuid_fn(&u, d) != CUDA_SUCCESS || total_fn(&total, d) != CUDA_SUCCESS)
            return -1;
        format_uuid((const unsigned char *)u.bytes, out[i].uuid);
        out[i].total = total;
    }
    return n;
}

/* The device list, asked once per shim_cuda_init (its limits and its device map both want
 * it).  Under init_mutex; `cuda_list_n` is -1 outside an init. */
static struct device_info cuda_list[SHIM_MAX_ORDINALS];
static int cuda_list_n = -1;

static int cuda_devices_once(struct device_info *out, int max)
{
    if (cuda_list_n < 0)
        cuda_list_n = cuda_devices(cuda_list, SHIM_MAX_ORDINALS);
    int n = cuda_list_n < max ? cuda_list_n : max;
    if (n > 0)
        memcpy(out, cuda_list, (size_t)n * sizeof *out);
    return n;
}

typedef nvmlReturn_t (*nvml_count_fn)(unsigned int *);
typedef nvmlReturn_t (*nvml_by_index_fn)(unsigned int, nvmlDevice_t *);
typedef nvmlReturn_t (*nvml_by_uuid_fn)(const char *, nvmlDevice_t *);
typedef nvmlReturn_t (*nvml_uuid_fn)(nvmlDevice_t, char *, unsigned int);
typedef nvmlReturn_t (*nvml_mem_fn)(nvmlDevice_t, nvmlMemory_t *);

/* The NVML handle of a CUDA_VISIBLE_DEVICES entry: an index, a UUID, or a UUID
 * prefix (CUDA accepts any unique prefix). */
static int nvml_handle_of_entry(const char *tok, nvmlDevice_t *dev)
{
    nvml_by_index_fn by_index = (nvml_by_index_fn)shim_nvml_sym("nvmlDeviceGetHandleByIndex_v2");
    nvml_count_fn count_fn = (nvml_count_fn)shim_nvml_sym("nvmlDeviceGetCount_v2");
    nvml_uuid_fn uuid_fn = (nvml_uuid_fn)shim_nvml_sym("nvmlDeviceGetUUID");
    if (!by_index || !count_fn || !uuid_fn)
        return -1;
    if (tok[0] >= '0' && tok[0] <= '9') {
        char *end;
        long idx = strtol(tok, &end, 10);
        return *end == 0 && idx >= 0 && by_index((unsigned)idx, dev) == NVML_SUCCESS ? 0 : -1;
    }
    unsigned n = 0, found = 0;
    if (count_fn(&n) != NVML_SUCCESS)
        return -1;
    for (unsigned i = 0; i < n; i++) {
        nvmlDevice_t d;
        char uuid[CGPU_UUID_LEN];
        if (by_index(i, &d) == NVML_SUCCESS && uuid_fn(d, uuid, sizeof uuid) == NVML_SUCCESS &&
            strncmp(uuid, tok, strlen(tok)) == 0) {
            *dev = d;
            found++;
        }
    }
    return found == 1 ? 0 : -1;
}

/* Visible devices by CUDA ordinal, through NVML; -1 when any cannot be resolved
 * (the caller must then not decide anything from this list). */
static int nvml_devices(struct device_info *out, int max)
{
    nvml_count_fn count_fn = (nvml_count_fn)shim_nvml_sym("nvmlDeviceGetCount_v2");
    nvml_by_index_fn by_index = (nvml_by_index_fn)shim_nvml_sym("nvmlDeviceGetHandleByIndex_v2");
    nvml_uuid_fn uuid_fn = (nvml_uuid_fn)shim_nvml_sym("nvmlDeviceGetUUID");
    nvml_mem_fn mem_fn = (nvml_mem_fn)shim_nvml_sym("nvmlDeviceGetMemoryInfo");
    unsigned int n = 0;
    if (!count_fn || !by_index || !uuid_fn || !mem_fn || count_fn(&n) != NVML_SUCCESS)
        return -1;
    nvmlDevice_t handles[SHIM_MAX_ORDINALS];
    int got = 0;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", cvd);
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",", &save); tok && got < SHIM_MAX_ORDINALS;
             tok = strtok_r(NULL, ",", &save))
            if (nvml_handle_of_entry(tok, &handles[got++]) != 0)
                return -1;
    } else {
        for (unsigned i = 0; i < n && got < SHIM_MAX_ORDINALS; i++)
            if (by_index(i, &handles[got++]) != NVML_SUCCESS)
                return -1;
    }
    if (got > max)
        return -1; /* more devices than a ledger holds: let CUDA's init fail closed */
    for (int i = 0; i < got; i++) {
        nvmlMemory_t mem;
        if (uuid_fn(handles[i], out[i].uuid, CGPU_UUID_LEN) != NVML_SUCCESS || mem_fn(handles[i], &mem) != NVML_SUCCESS)
            return -1;
        out[i].total = mem.total;
    }
    return got;
}

/* ---- the ledger directory ------------------------------------------------------------ */

static int ledger_dir(char *out, size_t n)
{
    const char *e = secure_getenv(CGPU_ENV_LEDGER_DIR) /* a setuid program must not be steered */;
    struct stat st;
    if (e && *e) {
        snprintf(out, n, "%s", e);
        return 0;
    }
    if (stat(CGPU_CONTAINER_LEDGER_DIR, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(out, n, "%s", CGPU_CONTAINER_LEDGER_DIR);
        return 0;
    }
    const char *xdg = secure_getenv("XDG_RUNTIME_DIR");
    if (xdg && *xdg)
        snprintf(out, n, "%s/cgpu", xdg);
    else
        snprintf(out, n, "/tmp/cgpu-%u", (unsigned)getuid());
    return 1; /* private: created on demand */
}

static int ensure_private_dir(const char *dir)
{
    struct stat st;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return -1;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) {
        errno = EPERM;
        return -1;
    }
    return 0;
}

/* ---- loading the limits ---------------------------------------------------------------- */

typedef int (*enumerate_fn)(struct device_info *, int);

static int request_has_compute(const struct cgpu_request *req)
{
    unsigned any = req->compute_default;
    for (int i = 0; i < 16; i++)
        any |= req->compute_by_ordinal[i];
    return req->kind != CGPU_REQ_DISABLED && any != 0;
}

/* Whether the arbiter gates a GPU of this container: its socket is in the container's directory
 * (it makes one only where some container on one of this container's GPUs has a compute limit). */
static int turns_offered(const char *dir)
{
    char sock[4200];
    struct stat st;
    snprintf(sock, sizeof sock, "%s/%s", dir, CGPU_COMPUTE_SOCKET_NAME);
    return stat(sock, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* Whether launches are gated: a compute limit applies (cgpu.conf first, else the environment),
 * or the arbiter offers the container turns (best effort: no limit of its own, on a GPU where a
 * neighbour has one).  A malformed source counts as yes: the shim refuses to run anyway, and
 * hooking is harmless.  Decided once, at the first lookup of a launch function: a process that
 * started before the offer stays unhooked (docs/architecture.md, "Best effort"). */
static int compute_requested(void)
{
    extern char **environ;
    struct cgpu_request req;
    int env_rc = cgpu_request_from_env((const char *const *)environ, &req);
    if (env_rc == CGPU_OK && req.kind == CGPU_REQ_DISABLED)
        return 0;
    char dir[4096], conf[4200];
    ledger_dir(dir, sizeof dir);
    snprintf(conf, sizeof conf, "%s/%s", dir, CGPU_CONFIG_NAME);
    struct cgpu_config cfg;
    int rc = cgpu_config_load(conf, &cfg);
    if (rc == CGPU_OK) {
        for (unsigned i = 0; i < cfg.nentries; i++)
            if (cfg.entries[i].compute)
                return 1;
        return turns_offered(dir);
    }
    if (!(rc == CGPU_ERR_IO && errno == ENOENT))
        return 1;
    return env_rc != CGPU_OK || request_has_compute(&req);
}

int compute_enabled(void)
{
    static int cached = -1;
    int c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (likely(c >= 0))
        return c;
    c = compute_requested();
    __atomic_store_n(&cached, c, __ATOMIC_RELAXED);
    return c;
}

static int slices_from_config; /* the slices came from cgpu.conf */

/* Compute the slices and open the ledger.  Caller holds init_mutex.  Returns
 * SHIM_PASSTHROUGH, SHIM_LIMITED, SHIM_FAILED, or SHIM_UNINIT when the driver
 * cannot be asked yet. */
static int load_limits(enumerate_fn enumerate, int authoritative)
{
    if (setup_state != SHIM_UNINIT)
        return setup_state;
    extern char **environ;
    if (cgpu_request_disabled((const char *const *)environ))
        return setup_state = SHIM_PASSTHROUGH;

    const char *ovh = getenv(CGPU_ENV_CONTEXT_OVERHEAD);
    if (ovh) {
        unsigned long long v = 0;
        if (strcmp(ovh, "0") != 0 && cgpu_parse_size(ovh, &v) != 0) {
            shim_fail_line(CGPU_ENV_CONTEXT_OVERHEAD "=%.40s is malformed", ovh);
            return setup_state = SHIM_FAILED;
        }
        ctx_overhead_env = (long long)v;
    }

    char dir[4096], conf[4200], path[4200];
    int private_dir = ledger_dir(dir, sizeof dir);
    snprintf(conf, sizeof conf, "%s/%s", dir, CGPU_CONFIG_NAME);
    struct cgpu_config cfg;
    int rc = cgpu_config_load(conf, &cfg);
    if (rc != CGPU_OK && !(rc == CGPU_ERR_IO && errno == ENOENT)) {
        shim_fail_line("%s", cfg.error);
        return setup_state = SHIM_FAILED;
    }
    slices_from_config = rc == CGPU_OK;
    if (rc != CGPU_OK) {
        /* No config: the environment gives the slices (read only now: with a config,
         * no limit variable counts). */
        struct cgpu_request req;
        int env_rc = cgpu_request_from_env((const char *const *)environ, &req);
        if (env_rc != CGPU_OK) {
            shim_fail_line("%s", req.error);
            return setup_state = SHIM_FAILED;
        }
        if (req.kind == CGPU_REQ_NONE && !request_has_compute(&req))
            return setup_state = SHIM_PASSTHROUGH;
        struct device_info devs[SHIM_MAX_ORDINALS];
        int n = enumerate(devs, SHIM_MAX_ORDINALS);
        if (n < 0)
            return SHIM_UNINIT;
        memset(&cfg, 0, sizeof cfg);
        for (int i = 0; i < n; i++) {
            unsigned long long slice;
            unsigned compute = i < 16 ? cgpu_request_compute(&req, (unsigned)i) : req.compute_default;
            if (cgpu_request_slice(&req, (unsigned)i, devs[i].total, &slice) != 0) {
                if (!compute)
                    continue;
                slice = devs[i].total; /* a compute limit alone: memory tracked, not limited */
            }
            if (cfg.nentries >= CGPU_MAX_DEVICES) {
                shim_fail_line("more than %d GPUs have a slice", CGPU_MAX_DEVICES);
                return setup_state = SHIM_FAILED;
            }
            memcpy(cfg.entries[cfg.nentries].uuid, devs[i].uuid, CGPU_UUID_LEN);
            cfg.entries[cfg.nentries].compute = compute;
            cfg.entries[cfg.nentries].compute_policy = compute ? req.compute_policy : 0;
            cfg.entries[cfg.nentries].compute_priority = compute ? req.compute_priority : 0;
            cfg.entries[cfg.nentries++].limit = slice;
        }
        if (cfg.nentries == 0)
            /* Only CUDA's own device list may settle "no slice anywhere" for good. */
            return authoritative ? (setup_state = SHIM_PASSTHROUGH) : SHIM_UNINIT;
        if (private_dir && ensure_private_dir(dir) != 0) {
            shim_fail_line("cannot use the ledger directory %s: %s", dir, strerror(errno));
            return setup_state = SHIM_FAILED;
        }
        /* Inside a container, keep processes that lose their environment limited. */
        if (strcmp(dir, CGPU_CONTAINER_LEDGER_DIR) == 0)
            config_write_atomic(dir, &cfg);
    }
    snprintf(path, sizeof path, "%s/%s", dir, CGPU_LEDGER_NAME);
    snprintf(g_shim.dir, sizeof g_shim.dir, "%s", dir);
    rc = ledger_open(path, LEDGER_CREATE, &g_shim.ledger);
    if (rc == CGPU_OK && !g_shim.ledger.writable)
        rc = CGPU_ERR_IO;
    if (rc == CGPU_OK)
        rc = ledger_ensure_devices(&g_shim.ledger, &cfg);
    if (rc != CGPU_OK) {
        shim_fail_line("cannot use the ledger %s: %s", path, cgpu_strerror(rc));
        ledger_close(&g_shim.ledger);
        return setup_state = SHIM_FAILED;
    }
    /* Turns: under a limit, and best effort on the rest of its GPUs where launches are gated
     * (the arbiter REFUSEs the GPUs it does not gate; the gate then stays open). */
    int best_effort = slices_from_config && compute_enabled();
    for (unsigned i = 0; i < cfg.nentries; i++) {
        int dev = ledger_find_device(g_shim.ledger.l, cfg.entries[i].uuid);
        if (dev >= 0 && dev < CGPU_MAX_DEVICES)
            g_shim.ledger.turns[dev] = cfg.entries[i].compute || best_effort;
    }
    for (unsigned i = 0; i < cfg.nentries; i++) {
        int dev = cfg.entries[i].has_context ? ledger_find_device(g_shim.ledger.l, cfg.entries[i].uuid) : -1;
        if (dev >= 0 && dev < CGPU_MAX_DEVICES) {
            ctx_overhead_conf[dev] = cfg.entries[i].context;
            ctx_overhead_conf_set[dev] = 1;
        }
    }
    return setup_state = SHIM_LIMITED;
}

int shim_claim_slot(void)
{
    if (__atomic_load_n(&g_shim.ledger.slot, __ATOMIC_RELAXED) >= 0)
        return 0;
    if (ledger_claim_slot(&g_shim.ledger) == CGPU_OK)
        return 0;
    fprintf(stderr, "cgpu: no free process slot in the container ledger (%d processes); refusing GPU memory\n",
            CGPU_MAX_SLOTS);
    return -1;
}

int shim_cuda_init(int driver_ready)
{
    pthread_mutex_lock(&init_mutex);
    int s = __atomic_load_n(&g_shim.state, __ATOMIC_ACQUIRE);
    if (s != SHIM_UNINIT) {
        pthread_mutex_unlock(&init_mutex);
        return s;
    }
    struct device_info devs[SHIM_MAX_ORDINALS];
    int n = -1;
    cuda_list_n = -1;
    s = load_limits(cuda_devices_once, 1);
    if (s == SHIM_LIMITED && (n = cuda_devices_once(devs, SHIM_MAX_ORDINALS)) >= 0) {
        for (int i = 0; i < SHIM_MAX_ORDINALS; i++)
            g_shim.devmap[i] = i < n ? ledger_find_device(g_shim.ledger.l, devs[i].uuid) : -1;
        /* The container's config names its GPUs: a visible GPU it does not name
         * would run unlimited, so refuse instead. */
        for (int i = 0; i < n && slices_from_config && s == SHIM_LIMITED; i++)
            if (g_shim.devmap[i] < 0) {
                shim_fail_line("%s is visible but has no slice in " CGPU_CONFIG_NAME, devs[i].uuid);
                s = SHIM_FAILED;
            }
        g_shim.single_device = n == 1 ? g_shim.devmap[0] : SHIM_MULTI_DEVICE;
        g_shim.ctx_get_device = (int (*)(int *))shim_driver_sym("cuCtxGetDevice");
        g_shim.ctx_get_current = (int (*)(void **))shim_driver_sym("cuCtxGetCurrent");
        if (s == SHIM_LIMITED && shim_claim_slot() != 0)
            s = SHIM_FAILED;
    } else if (s == SHIM_LIMITED || s == SHIM_UNINIT) {
        /* A limit applies but the driver cannot list its devices.  Before cuInit
         * that is expected (the caller's call fails anyway); after it, fail closed. */
        if (!driver_ready) {
            cuda_list_n = -1;
            pthread_mutex_unlock(&init_mutex);
            return SHIM_UNINIT;
        }
        shim_fail_line("cannot list the GPUs through the CUDA driver");
        s = SHIM_FAILED;
    }
    cuda_list_n = -1;
    __atomic_store_n(&g_shim.state, s, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&init_mutex);
    return s;
}

/* ---- NVML's view ----------------------------------------------------------------------- */

int shim_nvml_view(nvmlDevice_t device, uint64_t *limit, uint64_t *used)
{
    pthread_mutex_lock(&init_mutex);
    int s = load_limits(nvml_devices, 0);
    pthread_mutex_unlock(&init_mutex);
    if (s == SHIM_UNINIT) {
        static int said;
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
            shim_fail_line("cannot list the GPUs through NVML");
        return SHIM_FAILED; /* a limit applies: never show the whole device */
    }
    if (s != SHIM_LIMITED)
        return s;
    nvml_uuid_fn uuid_fn = (nvml_uuid_fn)shim_nvml_sym("nvmlDeviceGetUUID");
    char uuid[CGPU_UUID_LEN];
    if (!uuid_fn || uuid_fn(device, uuid, sizeof uuid) != NVML_SUCCESS)
        return SHIM_PASSTHROUGH;
    struct ledger *l = g_shim.ledger.l;
    int d = ledger_find_device(l, uuid);
    if (d < 0)
        return SHIM_PASSTHROUGH;
    /* Never wait on another process (one may be stopped inside the lock): free dead
     * slots only if the lock is free, and count what live processes hold. */
    ledger_try_sweep(&g_shim.ledger);
    *limit = g_shim.ledger.limit[d];
    *used = ledger_live_used(&g_shim.ledger, (unsigned)d);
    return SHIM_LIMITED;
}

/* ---- context overhead ---------------------------------------------------------------- */

/* Host-level used memory of ledger device `dev`, through the real NVML. */
static int nvml_used(int dev, uint64_t *used)
{
    /* Looked up and initialised once: the before and after samples of a start. */
    static int nvml_ready;
    static nvml_by_uuid_fn by_uuid;
    static nvml_mem_fn mem_fn;
    if (!__atomic_load_n(&nvml_ready, __ATOMIC_ACQUIRE)) {
        nvmlReturn_t (*init_fn)(void) = (nvmlReturn_t(*)(void))shim_nvml_sym("nvmlInit_v2");
        nvml_by_uuid_fn u = (nvml_by_uuid_fn)shim_nvml_sym("nvmlDeviceGetHandleByUUID");
        nvml_mem_fn m = (nvml_mem_fn)shim_nvml_sym("nvmlDeviceGetMemoryInfo");
        if (!init_fn || !u || !m || init_fn() != NVML_SUCCESS)
            return -1;
        __atomic_store_n(&by_uuid, u, __ATOMIC_RELAXED);
        __atomic_store_n(&mem_fn, m, __ATOMIC_RELAXED);
        __atomic_store_n(&nvml_ready, 1, __ATOMIC_RELEASE);
    }
    nvmlDevice_t h;
    nvmlMemory_t mem;
    nvml_by_uuid_fn u = __atomic_load_n(&by_uuid, __ATOMIC_RELAXED);
    nvml_mem_fn m = __atomic_load_n(&mem_fn, __ATOMIC_RELAXED);
    if (u(g_shim.ledger.l->devices[dev].uuid, &h) != NVML_SUCCESS || m(h, &mem) != NVML_SUCCESS)
        return -1;
    *used = mem.used;
    return 0;
}

void shim_context_overhead_before(int dev)
{
    if (dev < 0 || dev >= CGPU_MAX_DEVICES || ctx_overhead_conf_set[dev] || ctx_overhead_env >= 0)
        return;
    uint64_t used;
    ctx_used_before[dev] = nvml_used(dev, &used) == 0 ? used : UINT64_MAX;
}

uint64_t shim_context_overhead(int dev)
{
    if (dev < 0 || dev >= CGPU_MAX_DEVICES)
        return 0;
    if (ctx_overhead_conf_set[dev])
        return ctx_overhead_conf[dev];
    if (ctx_overhead_env >= 0)
        return (uint64_t)ctx_overhead_env;
    uint64_t after, before = ctx_used_before[dev];
    if (before == UINT64_MAX || nvml_used(dev, &after) != 0 || after <= before)
        return 0;
    uint64_t delta = after - before;
    /* A context takes hundreds of MiB; more means another tenant allocated meanwhile. */
    return delta > CGPU_MAX_CONTEXT_OVERHEAD ? 0 : delta;
}

/* ---- fork ------------------------------------------------------------------------------ */

void shim_forget_process(void)
{
    pthread_mutex_init(&init_mutex, NULL);
    ledger_forget_process();
    if (g_shim.ledger.l)
        ledger_close(&g_shim.ledger); /* the parent keeps its own liveness lock */
    memset(g_shim.contexts, 0, sizeof g_shim.contexts);
    memset(g_shim.primary, 0, sizeof g_shim.primary);
    memset(ctx_overhead_conf_set, 0, sizeof ctx_overhead_conf_set);
    g_shim.single_device = SHIM_MULTI_DEVICE;
    setup_state = SHIM_UNINIT;
    __atomic_store_n(&g_shim.state, SHIM_UNINIT, __ATOMIC_RELEASE);
}
