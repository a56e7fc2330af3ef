/* A scriptable CUDA driver client for the shim's tests.
 *
 *   cuda_probe <resolution> <command>...
 *
 * resolution: how the program finds the driver's functions
 *   direct   - linked against libcuda.so.1
 *   dlsym    - dlopen("libcuda.so.1") + dlsym(handle)
 *   default  - dlsym(RTLD_DEFAULT)
 *   next     - dlsym(RTLD_NEXT)
 *   gpa1     - cuGetProcAddress (v1), found with dlsym
 *   gpa2     - cudart-style: dlsym "cuGetProcAddress_v2", ask it for "cuGetProcAddress",
 *              then everything through that (per-thread variants where they exist)
 *
 * Each command prints one line.  See usage() for the commands.
 */
#define _GNU_SOURCE
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAXP 65536

static struct {
    CUresult (*init)(unsigned);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*primary_retain)(CUcontext *, CUdevice);
    CUresult (*ctx_set)(CUcontext);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*free_)(CUdeviceptr);
    CUresult (*pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
    CUresult (*managed)(CUdeviceptr *, size_t, unsigned);
    CUresult (*info)(size_t *, size_t *);
    CUresult (*total)(size_t *, CUdevice);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream);
    CUresult (*free_async)(CUdeviceptr, CUstream);
    CUresult (*pool_alloc)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*default_pool)(CUmemoryPool *, CUdevice);
    CUresult (*array)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
    CUresult (*array3d)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
    CUresult (*array_destroy)(CUarray);
    CUresult (*mipmap)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned);
    CUresult (*mipmap_destroy)(CUmipmappedArray);
    CUresult (*primary_reset)(CUdevice);
    CUresult (*ctx_create)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice);
    CUresult (*ctx_destroy)(CUcontext);
    CUresult (*addr_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*addr_free)(CUdeviceptr, size_t);
    CUresult (*stream_sync)(CUstream);
} f;

static CUdevice g_dev;
static CUcontext g_ctx;
static CUdeviceptr ptrs[MAXP];
static int nptrs;

static void *sym_direct(const char *name)
{
#define D(n) if (strcmp(name, #n) == 0) return (void *)&n;
    D(cuInit) D(cuDeviceGet) D(cuDevicePrimaryCtxRetain) D(cuCtxSetCurrent) D(cuMemAlloc_v2) D(cuMemFree_v2)
    D(cuMemAllocPitch_v2) D(cuMemAllocManaged) D(cuMemGetInfo_v2) D(cuDeviceTotalMem_v2) D(cuMemCreate)
    D(cuMemRelease) D(cuMemAllocAsync) D(cuMemFreeAsync) D(cuMemAllocFromPoolAsync) D(cuDeviceGetDefaultMemPool)
    D(cuArrayCreate_v2) D(cuArray3DCreate_v2) D(cuArrayDestroy) D(cuMipmappedArrayCreate) D(cuMipmappedArrayDestroy)
    D(cuDevicePrimaryCtxReset_v2) D(cuCtxCreate_v4) D(cuCtxDestroy_v2) D(cuMemAddressReserve) D(cuMemMap)
    D(cuMemUnmap) D(cuMemAddressFree) D(cuStreamSynchronize)
#undef D
    return NULL;
}

/* name -> (base name for cuGetProcAddress, version) */
static void base_of(const char *name, char *base, int *version)
{
    snprintf(base, 64, "%s", name);
    char *v = strstr(base, "_v");
    *version = 13000;
    if (v && v[2] >= '2' && v[2] <= '9' && v[3] == 0)
        *v = 0;
}

static void resolve(const char *how)
{
    static const char *const names[] = {
        "cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuMemAlloc_v2", "cuMemFree_v2",
        "cuMemAllocPitch_v2", "cuMemAllocManaged", "cuMemGetInfo_v2", "cuDeviceTotalMem_v2", "cuMemCreate",
        "cuMemRelease", "cuMemAllocAsync", "cuMemFreeAsync", "cuMemAllocFromPoolAsync", "cuDeviceGetDefaultMemPool",
        "cuArrayCreate_v2", "cuArray3DCreate_v2", "cuArrayDestroy", "cuMipmappedArrayCreate",
        "cuMipmappedArrayDestroy", "cuDevicePrimaryCtxReset_v2", "cuCtxCreate_v4", "cuCtxDestroy_v2",
        "cuMemAddressReserve", "cuMemMap", "cuMemUnmap", "cuMemAddressFree", "cuStreamSynchronize"};
    void **slots = (void **)&f;
    void *h = NULL;
    CUresult (*gpa1)(const char *, void **, int, cuuint64_t) = NULL;
    CUresult (*gpa2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) = NULL;
    if (strcmp(how, "direct") != 0) {
        h = dlopen("libcuda.so.1", RTLD_NOW);
        if (!h) {
            printf("error dlopen %s\n", dlerror());
            exit(2);
        }
    }
    if (strcmp(how, "gpa1") == 0)
        gpa1 = (CUresult(*)(const char *, void **, int, cuuint64_t))dlsym(h, "cuGetProcAddress");
    if (strcmp(how, "gpa2") == 0) {
        CUresult (*boot)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
            (CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))dlsym(
                h, "cuGetProcAddress_v2");
        CUdriverProcAddressQueryResult st;
        if (!boot || boot("cuGetProcAddress", (void **)&gpa2, 13000, 0, &st) != CUDA_SUCCESS || !gpa2) {
            printf("error bootstrap\n");
            exit(2);
        }
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *p = NULL;
        char base[64];
        int version;
        base_of(names[i], base, &version);
        if (strcmp(how, "direct") == 0)
            p = sym_direct(names[i]);
        else if (strcmp(how, "dlsym") == 0)
            p = dlsym(h, names[i]);
        else if (strcmp(how, "default") == 0)
            p = dlsym(RTLD_DEFAULT, names[i]);
        else if (strcmp(how, "next") == 0)
            p = dlsym(RTLD_NEXT, names[i]);
        else if (gpa1)
            gpa1(base, &p, version, CU_GET_PROC_ADDRESS_DEFAULT);
        else if (gpa2) {
            CUdriverProcAddressQueryResult st;
            gpa2(base, &p, version, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
        } else {
            printf("error unknown resolution %s\n", how);
            exit(2);
        }
        if (!p) {
            printf("error unresolved %s via %s\n", names[i], how);
            exit(2);
        }
        slots[i] = p;
    }
}

static void keep(CUdeviceptr p)
{
    if (nptrs < MAXP)
        ptrs[nptrs++] = p;
}

struct churn {
    int iters;
    size_t size;
    int failures;
};

static void *churn_thread(void *arg)
{
    struct churn *c = arg;
    f.ctx_set(g_ctx);
    for (int i = 0; i < c->iters; i++) {
        CUdeviceptr p;
        if (f.alloc(&p, c->size + (size_t)(i % 7) * 4096) != CUDA_SUCCESS) {
            c->failures++;
            continue;
        }
        if (f.free_(p) != CUDA_SUCCESS)
            c->failures++;
    }
    return NULL;
}

/* Threads grab memory until the slice refuses, all at once, then give it back. */
struct grab {
    size_t size;
    int got;
    pthread_barrier_t *barrier;
};

static void *grab_thread(void *arg)
{
    struct grab *g = arg;
    CUdeviceptr held[4096];
    f.ctx_set(g_ctx);
    pthread_barrier_wait(g->barrier);
    while (g->got < 4096 && f.alloc(&held[g->got], g->size) == CUDA_SUCCESS)
        g->got++;
    pthread_barrier_wait(g->barrier);
    for (int i = 0; i < g->got; i++)
        f.free_(held[i]);
    return NULL;
}

static CUmemAllocationProp vmm_prop(int dev)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    return prop;
}

static int nvml_query(void)
{
    typedef struct { unsigned long long total, free, used; } mem1;
    typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } mem2;
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) {
        printf("nvml error dlopen\n");
        return 1;
    }
    int (*init)(void) = (int (*)(void))dlsym(h, "nvmlInit_v2");
    int (*by_index)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    int (*info)(void *, mem1 *) = (int (*)(void *, mem1 *))dlsym(h, "nvmlDeviceGetMemoryInfo");
    int (*info2)(void *, mem2 *) = (int (*)(void *, mem2 *))dlsym(h, "nvmlDeviceGetMemoryInfo_v2");
    void *dev;
    mem1 m1;
    mem2 m2 = {.version = (unsigned)sizeof(mem2) | (2u << 24)};
    if (!init || !by_index || !info || !info2 || init() || by_index(0, &dev)) {
        printf("nvml error init\n");
        return 1;
    }
    int r1 = info(dev, &m1), r2 = info2(dev, &m2);
    printf("nvml %d %llu %llu %llu %d %llu %llu %llu\n", r1, m1.total, m1.used, m1.free, r2, m2.total, m2.used,
           m2.free);
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "commands: init alloc N free-all fill CHUNK info total pitch W H managed N vmm N vmm-cpu N\n"
                    "  async N pool N array W H array3d W H D mipmap W H LEVELS threads T ITERS SIZE loop ITERS SIZE\n"
                    "  nvml ready wait sleep MS\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage();
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    resolve(argv[1]);
    for (int i = 2; i < argc; i++) {
        const char *c = argv[i];
#define ARG(k) (i + (k) < argc ? strtoull(argv[i + (k)], NULL, 0) : 0)
        if (strcmp(c, "init") == 0) {
            CUresult rc = f.init(0);
            if (rc == CUDA_SUCCESS)
                rc = f.device_get(&g_dev, 0);
            if (rc == CUDA_SUCCESS)
                rc = f.primary_retain(&g_ctx, g_dev);
            if (rc == CUDA_SUCCESS)
                rc = f.ctx_set(g_ctx);
            printf("init %d\n", rc);
            if (rc != CUDA_SUCCESS)
                return 3;
        } else if (strcmp(c, "init-own") == 0) {
            /* As init, with a context of our own (cuCtxCreate) instead of the primary. */
            CUresult rc = f.init(0);
            if (rc == CUDA_SUCCESS)
                rc = f.device_get(&g_dev, 0);
            if (rc == CUDA_SUCCESS)
                rc = f.ctx_create(&g_ctx, NULL, 0, g_dev);
            printf("init-own %d\n", rc);
            if (rc != CUDA_SUCCESS)
                return 3;
        } else if (strcmp(c, "alloc") == 0) {
            CUdeviceptr p = 0;
            CUresult rc = f.alloc(&p, ARG(1));
            if (rc == CUDA_SUCCESS)
                keep(p);
            printf("alloc %d\n", rc);
            i++;
        } else if (strcmp(c, "free-all") == 0) {
            int bad = 0;
            for (int k = 0; k < nptrs; k++)
                bad += f.free_(ptrs[k]) != CUDA_SUCCESS;
            printf("free-all %d %d\n", nptrs, bad);
            nptrs = 0;
        } else if (strcmp(c, "reset") == 0) {
            /* cudaDeviceReset: the primary context and everything in it goes. */
            CUresult rc = f.primary_reset(g_dev);
            nptrs = 0;
            printf("reset %d\n", rc);
            if (rc == CUDA_SUCCESS && (rc = f.primary_retain(&g_ctx, g_dev)) == CUDA_SUCCESS)
                rc = f.ctx_set(g_ctx);
            printf("reinit %d\n", rc);
        } else if (strcmp(c, "ctx-alloc-destroy") == 0) {
            /* A context of our own: allocate in it, then destroy it without freeing. */
            CUcontext ctx;
            CUdeviceptr p;
            CUresult rc = f.ctx_create(&ctx, NULL, 0, g_dev);
            if (rc == CUDA_SUCCESS)
                rc = f.alloc(&p, ARG(1));
            printf("ctx-alloc %d\n", rc);
            printf("ctx-destroy %d\n", f.ctx_destroy(ctx));
            f.ctx_set(g_ctx);
            i++;
        } else if (strcmp(c, "fork-alloc") == 0) {
            /* A forked child owns none of the parent's memory and gets its own slot. */
            fflush(stdout);
            pid_t pid = fork();
            if (pid == 0) {
                CUdevice d;
                CUcontext ctx;
                CUdeviceptr p;
                CUresult rc = f.init(0);
                if (rc == CUDA_SUCCESS)
                    rc = f.device_get(&d, 0);
                if (rc == CUDA_SUCCESS)
                    rc = f.primary_retain(&ctx, d);
                if (rc == CUDA_SUCCESS)
                    rc = f.ctx_set(ctx);
                if (rc == CUDA_SUCCESS)
                    rc = f.alloc(&p, ARG(1));
                printf("child-alloc %d\n", rc);
                fflush(stdout);
                _exit(0);
            }
            int status;
            waitpid(pid, &status, 0);
            i++;
        } else if (strcmp(c, "export-table") == 0) {
            /* cudart calls this before anything else; it must reach the driver untouched. */
            void *h = dlopen("libcuda.so.1", RTLD_NOW);
            CUresult (*get)(const void **, const CUuuid *) =
                (CUresult(*)(const void **, const CUuuid *))dlsym(h, "cuGetExportTable");
            const void *table = NULL;
            CUuuid id;
            memset(&id, 0x42, sizeof id);
            printf("export-table %d\n", get ? get(&table, &id) : -1);
        } else if (strcmp(c, "free-bogus") == 0) {
            printf("free-bogus %d\n", f.free_((CUdeviceptr)0xdead0000ULL));
        } else if (strcmp(c, "fill") == 0) {
            size_t chunk = ARG(1), n = 0;
            CUdeviceptr p;
            CUresult rc;
            while ((rc = f.alloc(&p, chunk)) == CUDA_SUCCESS) {
                keep(p);
                n++;
            }
            printf("fill %zu %d\n", n, rc);
            i++;
        } else if (strcmp(c, "info") == 0) {
            size_t fr = 0, t = 0;
            CUresult rc = f.info(&fr, &t);
            printf("info %d %zu %zu\n", rc, fr, t);
        } else if (strcmp(c, "total") == 0) {
            size_t t = 0;
            CUresult rc = f.total(&t, g_dev);
            printf("total %d %zu\n", rc, t);
        } else if (strcmp(c, "pitch") == 0) {
            CUdeviceptr p;
            size_t pitch = 0;
            CUresult rc = f.pitch(&p, &pitch, ARG(1), ARG(2), 4);
            printf("pitch %d %zu\n", rc, pitch);
            if (rc == CUDA_SUCCESS)
                printf("pitch-free %d\n", f.free_(p));
            i += 2;
        } else if (strcmp(c, "managed") == 0) {
            CUdeviceptr p;
            CUresult rc = f.managed(&p, ARG(1), CU_MEM_ATTACH_GLOBAL);
            if (rc == CUDA_SUCCESS)
                keep(p);
            printf("managed %d\n", rc);
            i++;
        } else if (strcmp(c, "vmm") == 0 || strcmp(c, "vmm-cpu") == 0) {
            CUmemAllocationProp prop = vmm_prop(0);
            if (strcmp(c, "vmm-cpu") == 0)
                prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
            CUmemGenericAllocationHandle hnd;
            CUresult rc = f.create(&hnd, ARG(1), &prop, 0);
            /* Like PyTorch's expandable segments: the call may come from a thread with no context. */
            printf("%s %d\n", c, rc);
            if (rc == CUDA_SUCCESS)
                printf("%s-release %d\n", c, f.release(hnd));
            i++;
        } else if (strcmp(c, "vmm-map-release") == 0) {
            /* NCCL's pattern: create, map, release the handle at once; the memory lives
             * until the mapping goes. */
            CUmemAllocationProp prop = vmm_prop(0);
            CUmemGenericAllocationHandle hnd;
            CUdeviceptr va = 0;
            size_t size = ARG(1);
            CUresult rc = f.create(&hnd, size, &prop, 0);
            if (rc == CUDA_SUCCESS)
                rc = f.addr_reserve(&va, size, 0, 0, 0);
            if (rc == CUDA_SUCCESS)
                rc = f.map(va, size, 0, hnd, 0);
            if (rc == CUDA_SUCCESS)
                rc = f.release(hnd);
            printf("vmm-mapped %d\n", rc);
            size_t fr = 0, t = 0;
            f.info(&fr, &t);
            printf("info %d %zu %zu\n", 0, fr, t);
            if (rc == CUDA_SUCCESS) {
                printf("vmm-unmap %d\n", f.unmap(va, size));
                f.addr_free(va, size);
            }
            i++;
        } else if (strcmp(c, "vmm-hold") == 0) {
            CUmemAllocationProp prop = vmm_prop(0);
            CUmemGenericAllocationHandle hnd;
            printf("vmm-hold %d\n", f.create(&hnd, ARG(1), &prop, 0));
            i++;
        } else if (strcmp(c, "async") == 0) {
            CUdeviceptr p;
            CUresult rc = f.alloc_async(&p, ARG(1), NULL);
            printf("async %d\n", rc);
            if (rc == CUDA_SUCCESS) {
                printf("async-free %d\n", f.free_async(p, NULL));
                f.stream_sync(NULL); /* the pool keeps the memory until a sync */
            }
            i++;
        } else if (strcmp(c, "pool") == 0) {
            CUmemoryPool pool;
            CUdeviceptr p;
            CUresult rc = f.default_pool(&pool, g_dev);
            if (rc == CUDA_SUCCESS)
                rc = f.pool_alloc(&p, ARG(1), pool, NULL);
            printf("pool %d\n", rc);
            if (rc == CUDA_SUCCESS) {
                printf("pool-free %d\n", f.free_async(p, NULL));
                f.stream_sync(NULL); /* the pool keeps the memory until a sync */
            }
            i++;
        } else if (strcmp(c, "pool-fill") == 0) {
            /* Fill from another device's default pool, with this thread's context current. */
            CUmemoryPool pool;
            CUdevice other;
            CUdeviceptr p;
            size_t n = 0;
            CUresult rc = f.device_get(&other, (int)ARG(1));
            if (rc == CUDA_SUCCESS)
                rc = f.default_pool(&pool, other);
            while (rc == CUDA_SUCCESS && (rc = f.pool_alloc(&p, ARG(2), pool, NULL)) == CUDA_SUCCESS)
                n++;
            printf("pool-fill %zu %d\n", n, rc);
            i += 2;
        } else if (strcmp(c, "array") == 0) {
            CUDA_ARRAY_DESCRIPTOR d = {.Width = ARG(1), .Height = ARG(2), .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 4};
            CUarray a;
            CUresult rc = f.array(&a, &d);
            printf("array %d\n", rc);
            if (rc == CUDA_SUCCESS)
                printf("array-destroy %d\n", f.array_destroy(a));
            i += 2;
        } else if (strcmp(c, "array3d") == 0) {
            CUDA_ARRAY3D_DESCRIPTOR d = {.Width = ARG(1), .Height = ARG(2), .Depth = ARG(3),
                                         .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
            CUarray a;
            CUresult rc = f.array3d(&a, &d);
            printf("array3d %d\n", rc);
            if (rc == CUDA_SUCCESS)
                printf("array3d-destroy %d\n", f.array_destroy(a));
            i += 3;
        } else if (strcmp(c, "mipmap") == 0) {
            CUDA_ARRAY3D_DESCRIPTOR d = {.Width = ARG(1), .Height = ARG(2), .Format = CU_AD_FORMAT_FLOAT,
                                         .NumChannels = 1};
            CUmipmappedArray m;
            CUresult rc = f.mipmap(&m, &d, (unsigned)ARG(3));
            printf("mipmap %d\n", rc);
            if (rc == CUDA_SUCCESS)
                printf("mipmap-destroy %d\n", f.mipmap_destroy(m));
            i += 3;
        } else if (strcmp(c, "threads") == 0) {
            int t = (int)ARG(1);
            pthread_t th[256];
            struct churn ch[256];
            for (int k = 0; k < t && k < 256; k++) {
                ch[k] = (struct churn){.iters = (int)ARG(2), .size = ARG(3)};
                pthread_create(&th[k], NULL, churn_thread, &ch[k]);
            }
            int failures = 0;
            for (int k = 0; k < t && k < 256; k++) {
                pthread_join(th[k], NULL);
                failures += ch[k].failures;
            }
            printf("threads %d\n", failures);
            i += 3;
        } else if (strcmp(c, "threads-ctx") == 0) {
            /* threads, while this thread makes contexts of its own, allocates in each and
             * destroys it with the memory in it, ROUNDS times: what the churning threads hold
             * stays theirs. */
            int t = (int)ARG(1), rounds = (int)ARG(4), bad = 0;
            pthread_t th[256];
            struct churn ch[256];
            for (int k = 0; k < t && k < 256; k++) {
                ch[k] = (struct churn){.iters = (int)ARG(2), .size = ARG(3)};
                pthread_create(&th[k], NULL, churn_thread, &ch[k]);
            }
            for (int k = 0; k < rounds; k++) {
                CUcontext ctx;
                CUdeviceptr p;
                if (f.ctx_create(&ctx, NULL, 0, g_dev) != CUDA_SUCCESS) {
                    bad++;
                    continue;
                }
                bad += f.alloc(&p, ARG(3)) != CUDA_SUCCESS;
                bad += f.ctx_destroy(ctx) != CUDA_SUCCESS;
            }
            f.ctx_set(g_ctx);
            int failures = 0;
            for (int k = 0; k < t && k < 256; k++) {
                pthread_join(th[k], NULL);
                failures += ch[k].failures;
            }
            printf("threads-ctx %d %d\n", failures, bad);
            i += 4;
        } else if (strcmp(c, "grab") == 0) {
            int t = (int)ARG(1);
            pthread_t th[256];
            struct grab g[256];
            pthread_barrier_t barrier;
            if (t > 256)
                t = 256;
            pthread_barrier_init(&barrier, NULL, (unsigned)t);
            for (int k = 0; k < t; k++) {
                g[k] = (struct grab){.size = ARG(2), .barrier = &barrier};
                pthread_create(&th[k], NULL, grab_thread, &g[k]);
            }
            int total = 0;
            for (int k = 0; k < t; k++) {
                pthread_join(th[k], NULL);
                total += g[k].got;
            }
            pthread_barrier_destroy(&barrier);
            printf("grab %d\n", total);
            i += 2;
        } else if (strcmp(c, "loop") == 0) {
            long iters = (long)ARG(1);
            size_t size = ARG(2);
            for (long k = 0; iters == 0 || k < iters; k++) {
                CUdeviceptr p;
                if (f.alloc(&p, size) == CUDA_SUCCESS)
                    f.free_(p);
            }
            printf("loop done\n");
            i += 2;
        } else if (strcmp(c, "nvml") == 0) {
            nvml_query();
        } else if (strcmp(c, "ready") == 0) {
            printf("ready\n");
        } else if (strcmp(c, "wait") == 0) {
            char buf[64];
            while (fread(buf, 1, sizeof buf, stdin) > 0)
                ;
            printf("waited\n");
        } else if (strcmp(c, "sleep") == 0) {
            usleep((useconds_t)ARG(1) * 1000);
            i++;
        } else {
            usage();
            return 2;
        }
#undef ARG
    }
    return 0;
}
