/* The simulated CUDA driver (libcuda.so.1): private header shared by the
 * cuda_*.c files.  One global, `drv`, holds the whole driver state and is
 * guarded by drv.mu; the helpers below say when they expect it held.
 *
 * Build note: __CUDA_API_VERSION_INTERNAL turns off cuda.h's
 * "#define cuMemAlloc cuMemAlloc_v2" mapping so that every variant (legacy v1,
 * _v2, ..., _ptsz/_ptds) can be defined under its own exported name. */
#ifndef CGPU_CUDA_SIM_H
#define CGPU_CUDA_SIM_H

#define __CUDA_API_VERSION_INTERNAL 1

#pragma GCC visibility push(default)
#include <cuda.h>
#include <cudaProfiler.h>
#pragma GCC visibility pop

#include "sim_common.h"

#include <stdatomic.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- Small containers ---------------------------------------------------- */

/* Open-addressing hash map uintptr_t -> void* (key 0 is reserved). */
struct hmap {
    uintptr_t *keys;
    void **vals;
    size_t cap, n;
};

void *hm_get(const struct hmap *m, uintptr_t k);
int hm_put(struct hmap *m, uintptr_t k, void *v);
void *hm_del(struct hmap *m, uintptr_t k);

/* ---- Objects -------------------------------------------------------------- */

enum { O_CTX = 1, O_STREAM, O_EVENT, O_POOL, O_ARRAY, O_MIPMAP, O_VMM, O_MODULE, O_FUNC, O_GRAPH,
       O_GRAPH_NODE, O_GRAPH_EXEC };

struct sim_ctx;

/* The work queued on a stream: the mark of its last item, and a ring of the
 * marks of its last queue_depth kernels (CGPU_SIM_QUEUE_DEPTH).  A mark is a
 * point in this process's work on the context's device (sim_common.h): the
 * work is done when the device has run that much of the process's work. */
struct sim_queue {
    unsigned long long last_end;
    unsigned long long *ends;
    unsigned long long head;
};

struct obj {
    int type;
    struct sim_ctx *ctx; /* owner, or NULL */
};

/* A context-local storage entry (set through cuda_export.c's table; its
 * destructors run in cuda_context.c); dtor is a cls_dtor. */
typedef void (*cls_dtor)(CUcontext, void *key, void *value);
struct sim_cls {
    void *key, *value;
    void (*dtor)(void);
    struct sim_cls *next;
};

struct sim_ctx {
    struct obj hdr;
    struct sim_cls *cls;           /* context-local storage */
    int cache_config;              /* CUfunc_cache (cuCtxSetCacheConfig) */
    _Atomic int alive;
    int phys;            /* physical (configured) device index */
    int primary;
    unsigned flags;
    int refcount;        /* primary: retains; created: cuCtxAttach usage count */
    unsigned long long id;
    size_t limits[CU_LIMIT_MAX > 16 ? CU_LIMIT_MAX : 16];
    unsigned long long heap_charge; /* what the stack, malloc heap and printf FIFO take
                                       beyond their defaults (cuCtxSetLimit) */
    unsigned long long last_end;   /* mark of all work queued in the context */
    struct sim_queue q_legacy;     /* NULL and CU_STREAM_LEGACY */
    struct sim_queue q_ptds;       /* CU_STREAM_PER_THREAD (one for all threads) */
};

struct sim_stream {
    struct obj hdr;
    unsigned flags;
    int priority;
    unsigned long long id;
    void *capture;                 /* the graph it is capturing into (cuda_graph.c), or NULL */
    unsigned long long capture_id;
    struct sim_queue q;            /* q.ends: the array after the struct */
};

struct sim_event {
    struct obj hdr;
    unsigned flags;
    int recorded;
    int phys;                      /* the device of the work it waits for */
    unsigned long long mark;       /* completes when that work is done */
    unsigned long long time;       /* when it completed; 0: not known yet */
};

/* Dynamic shared memory a function may use before it opts in to more. */
#define SIM_SMEM_PER_BLOCK 49152
#define FATBIN_MAGIC 0xba55ed50u /* a fat binary's own header (cuda_module.c, cuda_export.c) */
#define FATBINC_MAGIC 0x466243b1u /* __fatBinC_Wrapper_t, versions 1 and 2 */

/* What nvcc wraps a fat binary in: the CUDA runtime hands it to the private table's
 * loaders and, from CUDA 13, to cuLibraryLoadData. */
struct fatbinc_wrapper {
    unsigned magic, version;
    const void *data; /* the fat binary */
    const void *filename_or_fatbins;
};

/* A module or library; its functions (kernels) are made on request by name. */
struct sim_func;
struct sim_global;
struct sim_kernel_stack {
    char *name;
    unsigned frame, stack;
};

struct sim_module {
    struct obj hdr;                /* ctx: NULL for a library */
    int library;
    struct sim_func *funcs;
    unsigned long long globals;    /* device address of its globals (a region), or 0 */
    struct sim_global *syms;       /* its global variables (cuModuleGetGlobal) */
    size_t nsyms;
    struct sim_kernel_stack *stacks; /* what its kernels need of the stack (a cubin's .nv.info) */
    size_t nstacks;
    struct sim_module *view;       /* a library's module (cuLibraryGetModule), made on request */
    struct sim_module *owner;      /* a library's module: its library, whose globals it shares */
};

struct sim_func {
    struct obj hdr;
    struct sim_module *mod;
    struct sim_func *next;
    int busy;                      /* cgpu_sim_busy: duration from the first parameter */
    int max_dyn_smem;              /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    int carveout;                  /* CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT */
    int cache_config;              /* CUfunc_cache */
    int non_portable_cluster;      /* CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED */
    unsigned frame;                /* CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: its stack frame */
    unsigned stack;                /* the per-thread stack a launch needs (frame and calls) */
    char name[];                   /* any length: C++ kernel names run to kilobytes */
};

struct sim_pool {
    struct obj hdr;
    int phys;            /* -1: host pool */
    int is_default;
    int destroyed;
    unsigned long long used, peak, threshold;
    unsigned long long kept; /* freed, still reserved and charged (cuda_pool.c) */
    int reuse[4];
    CUmemAccess_flags access[SIM_MAX_DEVICES]; /* peers' access (its own device: read-write) */
};

struct sim_array {
    struct obj hdr;
    int phys;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    unsigned levels;     /* mipmapped: level count; plain: 0 */
    unsigned long long charge;
    unsigned char *bk;   /* its bytes (level 0 first, rows of row_bytes), or NULL */
    unsigned long long bytes, row_bytes;
};

/* Pinned host memory: cuMemHostAlloc/cuMemAllocHost (registered 0) or
 * cuMemHostRegister (registered 1). */
struct hrange {
    unsigned long long base, size;
    unsigned flags;
    int registered;
    struct sim_ctx *ctx;
    unsigned long long id;
};

struct sim_vmm {
    struct obj hdr;
    int phys;            /* -1: host memory, not charged */
    unsigned long long size, charge;
    CUmemAllocationProp prop;
    int refs, maps;
    unsigned long long off; /* its bytes: at off in the physical file (cuda_backing.c), */
    int fd;                 /* or, once exported or imported, a file of its own (else -1) */
};

/* A range of the fake device address space. */
enum { R_ALLOC = 1, R_RESERVE };

struct mapping {
    unsigned long long va, size, off;
    struct sim_vmm *h;
    unsigned access;     /* CU_MEM_ACCESS_FLAGS_PROT_* that cuMemSetAccess granted (any device) */
};

struct region {
    unsigned long long base, size;   /* address footprint */
    unsigned long long req;          /* bytes asked for */
    unsigned long long charge;       /* bytes charged to the device */
    unsigned long long id;
    int kind;
    int phys;
    int managed;
    int ipc;                         /* opened from another process's handle */
    int touched;                     /* a copy or set reached its bytes (cuda_transfer.c) */
    struct sim_ctx *ctx;
    struct sim_pool *pool;
    struct mapping *maps;            /* R_RESERVE */
    size_t nmaps, capmaps;
};

struct ext {
    unsigned long long base, end;
};

struct zone {
    unsigned long long lo, hi;
    struct ext *ext;
    size_t n, cap;
};

/* Legacy (32-bit) allocations come from zone 0, below 4 GiB; everything else
 * from zone 1.  Both are address space reserved in this process
 * (cuda_backing.c). */

/* ---- The driver state ------------------------------------------------------ */

struct sim_driver {
    pthread_mutex_t mu;
    _Atomic int inited;
    int init_done;
    CUresult init_rc;
    unsigned gen;                     /* bumped in a forked child */
    struct sim_config cfg;
    int nvis;
    int vis[SIM_MAX_DEVICES];         /* ordinal -> physical */
    int ord[SIM_MAX_DEVICES];         /* physical -> ordinal or -1 */
    unsigned long long used[SIM_MAX_DEVICES];
    int ctx_count[SIM_MAX_DEVICES];
    struct sim_ctx *primary[SIM_MAX_DEVICES];
    unsigned primary_flags[SIM_MAX_DEVICES];
    struct sim_pool *default_pool[SIM_MAX_DEVICES];
    struct sim_pool *current_pool[SIM_MAX_DEVICES];
    /* each device's graph memory pool (cuda_graph.c): in use by executable graphs, kept
     * unused, and their high watermarks */
    unsigned long long gmem_used[SIM_MAX_DEVICES], gmem_kept[SIM_MAX_DEVICES];
    unsigned long long gmem_used_high[SIM_MAX_DEVICES], gmem_reserved_high[SIM_MAX_DEVICES];
    struct sim_state *st;
    int sdev[SIM_MAX_DEVICES];
    int slot;
    struct sim_sched sched[SIM_MAX_DEVICES];  /* the device schedules (shared or private) */
    struct sim_work *work[SIM_MAX_DEVICES];   /* this process's work on each */
    int work_id[SIM_MAX_DEVICES];             /* its id in the schedule's run queue */
    unsigned long long last_start[SIM_MAX_DEVICES]; /* mark where its last kernel starts */
    struct zone zone[2];
    struct region **live;
    size_t nlive, caplive;
    struct hmap objs;                 /* handle -> struct obj* */
    struct hrange *hr;                /* pinned host ranges, sorted by base */
    size_t nhr, caphr;
    unsigned long long next_id;
};

extern struct sim_driver drv;

#define LOCK() pthread_mutex_lock(&drv.mu)
#define UNLOCK() pthread_mutex_unlock(&drv.mu)
#define INITED() atomic_load_explicit(&drv.inited, memory_order_acquire)
#define NEED_INIT()                                  \
    do {                                             \
        if (!INITED())                               \
            return CUDA_ERROR_NOT_INITIALIZED;       \
    } while (0)

static inline unsigned long long round_up(unsigned long long v, unsigned long long a)
{
    return (v + a - 1) / a * a;
}

static inline unsigned int sat32(unsigned long long v)
{
    return v > UINT_MAX ? UINT_MAX : (unsigned int)v;
}

/* ---- Address space (cuda_core.c; drv.mu held) ------------------------------ */

int zone_init(struct zone *z, unsigned long long lo, unsigned long long hi);
/* First fit (lowest address) with alignment; `hint` is tried first. */
int zone_take(struct zone *z, unsigned long long size, unsigned long long align,
              unsigned long long hint, unsigned long long *out);
void zone_give(struct zone *z, unsigned long long base, unsigned long long size);
struct zone *zone_of(unsigned long long addr);
int live_insert(struct region *r);
void live_remove(struct region *r);
struct region *live_exact(unsigned long long addr);
struct region *live_containing(unsigned long long addr);
struct mapping *mapping_containing(struct region *r, unsigned long long addr);

/* ---- Backing store (cuda_backing.c) ------------------------------------------ */

/* Reserve the zones and their backing files (cuInit); 0 or -1. */
int backing_init(void);
/* Whether `va` lies in a zone (device address space, live or not). */
int backing_is_device(unsigned long long va);
/* Where the bytes of device address `va` are, or NULL outside the zones. */
void *backing_ptr(unsigned long long va);
/* Make [va, va+size) readable and writable by the host (managed memory). */
int backing_managed(unsigned long long va, unsigned long long size);
/* Give the pages of [va, va+size) back (and unmap managed memory). */
void backing_free(unsigned long long va, unsigned long long size, int managed);
/* Back [va, va+size) by `fd` from `off` (cuMemMap, IPC); backing_unmap undoes it. */
int backing_map(unsigned long long va, unsigned long long size, int fd, unsigned long long off);
void backing_unmap(unsigned long long va, unsigned long long size);
/* Physical memory for a cuMemCreate handle: a range of the physical file
 * (drv.mu held); 0 or -1.  backing_phys_free gives its pages back;
 * backing_phys_map backs [va, va+size) by the file from `off`. */
int backing_phys_alloc(unsigned long long size, unsigned long long *off);
void backing_phys_free(unsigned long long off, unsigned long long size);
int backing_phys_map(unsigned long long va, unsigned long long size, unsigned long long off);
/* A file of its own with a handle's bytes, and `tail` after them; fd or -1. */
int backing_phys_own(unsigned long long off, unsigned long long size, const void *tail,
                     size_t tail_len);
/* The zone file behind `va` and its offset there, or -1. */
int backing_fd(unsigned long long va, unsigned long long *off);

/* ---- Accounting (cuda_core.c; drv.mu held) --------------------------------- */

void state_publish(int phys);
unsigned long long device_free(int phys);
CUresult charge(int phys, unsigned long long bytes);
void uncharge(int phys, unsigned long long bytes);

/* ---- Handles (cuda_core.c; drv.mu held) ------------------------------------- */

/* The live object behind handle `h` if it has type `type`, else NULL. */
void *obj_get(const void *h, int type);
/* A zeroed object of `size` bytes with its header set, registered as a
 * handle; NULL when out of host memory. */
void *obj_new(size_t size, int type, struct sim_ctx *ctx);
/* Unregister and free an object. */
void obj_free(void *o);

/* ---- Devices and contexts (cuda_device.c, cuda_context.c) ----------------- */

/* Physical index of visible ordinal `d`, or -1. */
int dev_phys(CUdevice d);
/* ---- Shared by every driver file (cuda_current.c, below them all) ---------- */

/* The calling thread's context stack; cuda_context.c pushes, pops and sets it. */
#define CTX_STACK_MAX 128
extern _Thread_local struct sim_ctx *tls_stack[CTX_STACK_MAX];
extern _Thread_local int tls_depth;
/* The top of the stack (emptied first in a forked child); NULL when empty. */
struct sim_ctx *tls_top(void);
/* The calling thread's current context, checked alive. */
CUresult cur_ctx(struct sim_ctx **out);
/* The context of stream `s` (NULL and the special handles: the current one). */
CUresult stream_ctx(CUstream s, struct sim_ctx **out);
/* stream_ctx with the lock taken, for calls that only validate a stream. */
CUresult stream_check(CUstream s);
/* The context and work queue of stream `s` (drv.mu held). */
CUresult stream_queue(CUstream s, struct sim_ctx **ctx, struct sim_queue **q);
/* Allocate a context's default-stream queues (drv.mu held); 0 or -1. */
int ctx_queues_init(struct sim_ctx *c);
/* How much of this process's work device `phys` has run, the schedule advanced
 * to now (no drv.mu needed; may be held). */
unsigned long long work_done(int phys);
/* When this process's work on `phys` reached `mark` (done by now). */
unsigned long long mark_time(int phys, unsigned long long mark);
/* Wait until the device has run this process's work up to `mark`, then run the
 * work registered with wait_on_settle that is due (no lock held). */
void wait_mark(int phys, unsigned long long mark);
/* Register what wait_mark runs after it waits (cuda_transfer.c: mem_settle). */
void wait_on_settle(void (*settle)(void));
/* Stream capture: what a call on a capturing stream adds to its graph instead of
 * running.  cuda_graph.c registers the operations (drv.mu held when they run). */
struct sim_capture_ops {
    CUresult (*alloc)(void *graph, int phys, unsigned long long bytes, CUdeviceptr *out);
    CUresult (*free)(void *graph, CUdeviceptr dptr);
    CUresult (*kernel)(void *graph, unsigned long long ns);
    int (*is_graph_mem)(CUdeviceptr dptr); /* an allocation node's address */
};
void capture_register(const struct sim_capture_ops *ops);
/* The graph stream `s` captures into, or NULL (drv.mu held). */
void *stream_capture(CUstream s);
/* Add to a capturing stream's graph (drv.mu held). */
CUresult capture_alloc(void *graph, int phys, unsigned long long bytes, CUdeviceptr *out);
CUresult capture_free(void *graph, CUdeviceptr dptr);
CUresult capture_kernel(void *graph, unsigned long long ns);
/* Whether `dptr` is a graph allocation's address (drv.mu held). */
int graph_mem_address(CUdeviceptr dptr);

/* ---- Memory, VMM, streams (drv.mu held) ------------------------------------ */

/* Pools keep what is freed into them; a synchronizing call gives back what
 * exceeds each pool's release threshold (cuda_pool.c).  drv.mu held. */
void pools_settle_locked(void);
void pools_release_device_locked(int phys);
CUresult mem_alloc_locked(struct sim_ctx *ctx, int phys, unsigned long long bytes, int low,
                          int managed, struct sim_pool *pool, CUdeviceptr *out);
void region_free(struct region *r);
/* The pinned host range containing `p`, or NULL. */
struct hrange *host_range(unsigned long long p);
/* Release an array's memory and handle (cuda_array.c). */
void array_free_locked(struct sim_array *a);
/* Run the copies and sets whose stream work is done (cuda_transfer.c; no lock held). */
void mem_settle(void);
/* prop->location -> physical device, -1 for host locations; -2 invalid (*err set). */
int location_phys(const CUmemLocation *loc, CUresult *err);

/* ---- Timeline (cuda_launch.c) ------------------------------------------------ */

/* Point drv.sched/work at the state file or a private schedule (cuInit). */
void timeline_init(void);
/* Queue a kernel of `ns` nanoseconds on stream `s`; blocks while the stream
 * has queue_depth kernels pending, while this process's last kernel starts
 * more than a time slice from now, or while the device's queue is full. */
CUresult launch_work(CUstream s, unsigned long long ns);
/* The duration of one launch of `f` with these parameters. */
CUresult kernel_duration(CUfunction f, void **params, void **extra, unsigned long long *ns, unsigned *stack);
/* What a context's heaps take beyond their defaults, and the stack a launch grows
 * (cuda_current.c). */
unsigned long long heaps_beyond_defaults(const size_t *limits);
CUresult ctx_stack_for_launch(unsigned need);
#define SIM_STACK_MAX (512ULL << 10) /* the driver refuses a larger per-thread stack */

/* ---- Contexts and modules for the private tables ---------------------------- */

/* The primary context of device `dev`, created inactive if missing (cuda_context.c). */
CUresult primary_ctx_handle(CUdevice dev, CUcontext *out);
/* A context handle this process made, alive (CUDA_ERROR_INVALID_CONTEXT,
 * CUDA_ERROR_CONTEXT_IS_DESTROYED otherwise). */
CUresult ctx_lookup_alive(CUcontext ctx, struct sim_ctx **out);
/* Run and free a context's detached local-storage entries (no lock held). */
void cls_run_dtors(struct sim_ctx *c, struct sim_cls *list);
/* A module in the current context for a checked image (cuda_module.c). */
CUresult module_load_image(CUmodule *out, const void *image);
/* The integrity check's digest (cuda_export.c), apart for tests. */
void sim_integrity_digest(unsigned version, unsigned long long unix_seconds,
                          unsigned driver_version, unsigned pid, unsigned thread,
                          const void *cudart, const void *integrity, const void *fn, int ndev,
                          const unsigned char (*uuids)[16], const int (*pci)[3],
                          unsigned long long out[2]);

/* ---- Entry points (cuda_procs.c) -------------------------------------------- */

/* CGPU_SIM_TRACE=1: log cuGetProcAddress, cuGetExportTable and unmodelled
 * calls to stderr. */
int trace_on(void);
/* What an unmodelled entry point returns (cuda_stubs.c). */
CUresult sim_unmodelled(const char *name);

#endif
