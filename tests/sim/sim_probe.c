/* The simulator's test probe: one command per run (argv[1]), driven by
 * tests/sim/.  Compiled against the real cuda.h and linked to the simulated
 * libcuda.so.1 and libnvidia-ml.so.1 by the `probe` fixture. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cgpu_nvml.h"

#include "probe_check.h"

static void *lib;
static void *sym(const char *name) { void *p = dlsym(lib, name); CHECK(p); return p; }

static size_t free_mem(void) { size_t f, t; OK(cuMemGetInfo(&f, &t)); return f; }

static CUcontext primary(int ordinal)
{
    CUdevice d; CUcontext c;
    OK(cuDeviceGet(&d, ordinal));
    OK(cuDevicePrimaryCtxRetain(&c, d));
    OK(cuCtxSetCurrent(c));
    return c;
}

static void uuid_str(const CUuuid *u, char *out)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    sprintf(out, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
            b[13], b[14], b[15]);
}

/* ---- commands ---- */

static int cmd_preinit(void)
{
    int n, v;
    CUdeviceptr p;
    const char *s;
    RC(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    RC(cuMemAlloc(&p, 1), CUDA_ERROR_NOT_INITIALIZED);
    RC(cuCtxSynchronize(), CUDA_ERROR_NOT_INITIALIZED);
    OK(cuDriverGetVersion(&v));
    printf("version %d\n", v);
    OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
    CHECK(strcmp(s, "out of memory") == 0);
    OK(cuGetErrorName(CUDA_ERROR_INVALID_CONTEXT, &s));
    CHECK(strcmp(s, "CUDA_ERROR_INVALID_CONTEXT") == 0);
    RC(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    void *fn;
    OK(cuGetProcAddress("cuInit", &fn, CUDA_VERSION, 0, NULL));
    const void *table = (const void *)1;
    CUuuid id = {{0}};
    RC(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_SUPPORTED);
    CHECK(table == NULL);
    RC(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    RC(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    printf("init %d\n", (int)cuInit(0));
    printf("again %d\n", (int)cuInit(0));
    return 0;
}

static int cmd_devices(void)
{
    int n;
    OK(cuInit(0));
    OK(cuDeviceGetCount(&n));
    printf("[");
    for (int i = 0; i < n; i++) {
        CUdevice d; CUuuid u; char name[128], uuid[64], bus[32]; size_t total; unsigned int t32;
        int major, minor, sms, vmm, pools, busid;
        OK(cuDeviceGet(&d, i));
        OK(cuDeviceGetName(name, sizeof name, d));
        OK(cuDeviceGetUuid(&u, d));
        uuid_str(&u, uuid);
        OK(cuDeviceTotalMem(&total, d));
        typedef CUresult (*total_v1_fn)(unsigned int *, CUdevice);
        total_v1_fn total_v1 = (total_v1_fn)sym("cuDeviceTotalMem");
        OK(total_v1(&t32, d));
        OK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
        OK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d));
        OK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d));
        OK(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, d));
        OK(cuDeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, d));
        OK(cuDeviceGetAttribute(&busid, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d));
        OK(cuDeviceGetPCIBusId(bus, sizeof bus, d));
        CUdevice back;
        OK(cuDeviceGetByPCIBusId(&back, bus));
        CHECK(back == d);
        printf("%s{\"name\":\"%s\",\"uuid\":\"%s\",\"total\":%zu,\"total32\":%u,\"cc\":\"%d.%d\","
               "\"sms\":%d,\"vmm\":%d,\"pools\":%d,\"bus\":\"%s\",\"busid\":%d}",
               i ? "," : "", name, uuid, total, t32, major, minor, sms, vmm, pools, bus, busid);
    }
    printf("]\n");
    CUdevice d;
    int v;
    RC(cuDeviceGet(&d, n), CUDA_ERROR_INVALID_DEVICE);
    RC(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, n), CUDA_ERROR_INVALID_DEVICE);
    return 0;
}

static int cmd_init(void)
{
    CUresult rc = cuInit(0);
    printf("%d\n", (int)rc);
    return 0;
}

static CUcontext shared_ctx;
static int destroyed;

static void *ctx_thread(void *arg)
{
    CUcontext c = (CUcontext)1, mine, popped;
    CUdeviceptr p;
    size_t f, t;
    OK(cuCtxGetCurrent(&c));
    CHECK(c == NULL);                              /* the stack is per thread */
    RC(cuMemAlloc(&p, 1), CUDA_ERROR_INVALID_CONTEXT);
    RC(cuMemGetInfo(&f, &t), CUDA_ERROR_INVALID_CONTEXT);
    RC(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    RC(cuCtxPopCurrent(&popped), CUDA_ERROR_INVALID_CONTEXT);
    OK(cuCtxPushCurrent(shared_ctx));
    OK(cuMemAlloc(&p, 1));
    OK(cuMemFree(p));
    OK(cuCtxPopCurrent(&popped));
    CHECK(popped == shared_ctx);
    CUdevice d;
    OK(cuDeviceGet(&d, 0));
    OK(cuCtxCreate(&mine, NULL, 0, d));           /* cuCtxCreate_v4: pushes it */
    OK(cuCtxGetCurrent(&c));
    CHECK(c == mine);
    OK(cuCtxDestroy(mine));                        /* and pops it */
    OK(cuCtxGetCurrent(&c));
    CHECK(c == NULL);
    RC(cuCtxPushCurrent(mine), CUDA_ERROR_INVALID_CONTEXT);
    return arg;
}

static void *destroyed_thread(void *arg)
{
    CUdeviceptr p;
    OK(cuCtxSetCurrent(shared_ctx));
    while (!__atomic_load_n(&destroyed, __ATOMIC_ACQUIRE)) usleep(1000);
    RC(cuMemAlloc(&p, 1), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    return arg;
}

static int cmd_contexts(void)
{
    OK(cuInit(0));
    CUcontext c;
    OK(cuCtxGetCurrent(&c));
    CHECK(c == NULL);
    CUdeviceptr p;
    RC(cuMemAlloc(&p, 1), CUDA_ERROR_INVALID_CONTEXT);
    CUdevice d;
    OK(cuDeviceGet(&d, 0));
    unsigned int flags; int active;
    OK(cuDevicePrimaryCtxGetState(d, &flags, &active));
    CHECK(!active);
    shared_ctx = primary(0);
    OK(cuDevicePrimaryCtxGetState(d, &flags, &active));
    CHECK(active);
    CUcontext again;
    OK(cuDevicePrimaryCtxRetain(&again, d));
    CHECK(again == shared_ctx);                    /* one primary context per device */
    OK(cuDevicePrimaryCtxRelease(d));
    CUdevice got;
    OK(cuCtxGetDevice(&got));
    CHECK(got == d);
    unsigned int api;
    OK(cuCtxGetApiVersion(NULL, &api));
    pthread_t t;
    pthread_create(&t, NULL, ctx_thread, NULL);
    pthread_join(t, NULL);

    /* A created context stacks over the primary one. */
    CUcontext created, popped;
    OK(cuCtxCreate(&created, NULL, 0, d));
    OK(cuCtxGetCurrent(&c));
    CHECK(c == created);
    OK(cuCtxPopCurrent(&popped));
    CHECK(popped == created);
    OK(cuCtxGetCurrent(&c));
    CHECK(c == shared_ctx);
    RC(cuCtxDestroy(shared_ctx), CUDA_ERROR_INVALID_CONTEXT);   /* primary: release it */

    /* A context destroyed while current elsewhere. */
    shared_ctx = created;
    pthread_create(&t, NULL, destroyed_thread, NULL);
    usleep(20000);
    OK(cuCtxDestroy(created));
    __atomic_store_n(&destroyed, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    RC(cuCtxDestroy(created), CUDA_ERROR_INVALID_CONTEXT);
    OK(cuDevicePrimaryCtxRelease(d));
    RC(cuDevicePrimaryCtxRelease(d), CUDA_ERROR_INVALID_CONTEXT);
    OK(cuDevicePrimaryCtxGetState(d, &flags, &active));
    CHECK(!active);
    RC(cuMemAlloc(&p, 1), CUDA_ERROR_CONTEXT_IS_DESTROYED);  /* still current, now inactive */
    OK(cuCtxSetCurrent(NULL));
    RC(cuMemAlloc(&p, 1), CUDA_ERROR_INVALID_CONTEXT);
    printf("ok\n");
    return 0;
}

static int cmd_alloc(void)
{
    OK(cuInit(0));
    primary(0);
    size_t f0, total;
    OK(cuMemGetInfo(&f0, &total));
    printf("{\"total\":%zu,\"free0\":%zu", total, f0);
    CUdeviceptr a, b, c, d;
    OK(cuMemAlloc(&a, 1));
    printf(",\"after1\":%zu", free_mem());
    OK(cuMemAlloc(&b, 3 << 20));
    printf(",\"after3m\":%zu", free_mem());
    CHECK(a != b);
    CUdeviceptr base; size_t size;
    OK(cuMemGetAddressRange(&base, &size, b + 100));
    CHECK(base == b && size == (3 << 20));
    OK(cuMemFree(a));
    OK(cuMemAlloc(&c, 1));
    CHECK(c == a);                                  /* freed ranges are reused */
    OK(cuMemFree(c));
    RC(cuMemFree(c), CUDA_ERROR_INVALID_VALUE);     /* double free */
    RC(cuMemFree(b + 8), CUDA_ERROR_INVALID_VALUE); /* not the start */
    RC(cuMemFree(0x1234), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(0));
    RC(cuMemAlloc(&d, 0), CUDA_ERROR_INVALID_VALUE);
    size_t pitch;
    OK(cuMemAllocPitch(&d, &pitch, 1000, 10, 4));
    CHECK(pitch == 1024);
    RC(cuMemAllocPitch(&c, &pitch, 1000, 10, 3), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(d));
    printf(",\"premanaged\":%zu", free_mem());
    OK(cuMemAllocManaged(&d, 5 << 20, CU_MEM_ATTACH_GLOBAL));
    printf(",\"managed\":%zu", free_mem());
    OK(cuMemFree(d));
    OK(cuMemFree(b));
    CHECK(free_mem() == f0);
    void *host;
    OK(cuMemAllocHost(&host, 64 << 20));           /* host memory is not charged */
    CHECK(free_mem() == f0);
    OK(cuMemFreeHost(host));
    RC(cuMemFreeHost(host), CUDA_ERROR_INVALID_VALUE);

    /* Copies and sets validate the device ranges. */
    char buf[64];
    OK(cuMemAlloc(&a, 4096));
    OK(cuMemcpyHtoD(a, buf, sizeof buf));
    OK(cuMemcpyDtoH(buf, a + 4000, 64));
    OK(cuMemsetD8(a, 0, 4096));
    RC(cuMemcpyHtoD(0x42, buf, sizeof buf), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(a));
    RC(cuMemsetD8(a, 0, 1), CUDA_ERROR_INVALID_VALUE);

    /* The legacy 32-bit entry point: a pointer below 4 GiB, charged the same. */
    typedef CUresult (*alloc_v1_fn)(unsigned int *, unsigned int);
    typedef CUresult (*free_v1_fn)(unsigned int);
    typedef CUresult (*info_v1_fn)(unsigned int *, unsigned int *);
    alloc_v1_fn alloc_v1 = (alloc_v1_fn)sym("cuMemAlloc");
    free_v1_fn free_v1 = (free_v1_fn)sym("cuMemFree");
    info_v1_fn info_v1 = (info_v1_fn)sym("cuMemGetInfo");
    unsigned int p32, f32, t32;
    OK(alloc_v1(&p32, 1 << 20));
    CHECK(p32 != 0);
    printf(",\"v1\":%zu", f0 - free_mem());
    OK(info_v1(&f32, &t32));
    OK(free_v1(p32));
    CHECK(free_mem() == f0);

    /* Out of memory, then everything back. */
    CUdeviceptr many[4096];
    int n = 0;
    CUresult rc;
    while ((rc = cuMemAlloc(&many[n], 64 << 20)) == CUDA_SUCCESS) n++;
    CHECK(rc == CUDA_ERROR_OUT_OF_MEMORY);
    printf(",\"blocks\":%d,\"left\":%zu", n, free_mem());
    for (int i = n - 1; i >= 0; i--) OK(cuMemFree(many[i]));
    CHECK(free_mem() == f0);
    printf("}\n");
    return 0;
}

static int cmd_ctxmem(void)
{
    OK(cuInit(0));
    CUdevice d;
    OK(cuDeviceGet(&d, 0));
    size_t total;
    OK(cuDeviceTotalMem(&total, d));
    CUcontext c1, c2, popped;
    OK(cuCtxCreate(&c1, NULL, 0, d));
    size_t one = free_mem();
    OK(cuCtxCreate(&c2, NULL, 0, d));
    size_t two = free_mem();
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 10 << 20));                  /* owned by c2 */
    size_t with = free_mem();
    OK(cuCtxDestroy(c2));                          /* frees what c2 allocated */
    OK(cuCtxPushCurrent(c1));
    size_t after = free_mem();
    OK(cuCtxPopCurrent(&popped));
    OK(cuCtxDestroy(c1));
    CUcontext pc = primary(0);
    (void)pc;
    size_t prim = free_mem();
    OK(cuMemAlloc(&p, 10 << 20));
    OK(cuDevicePrimaryCtxReset(d));                /* frees everything, deactivates */
    pc = primary(0);
    size_t reset = free_mem();
    RC(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
    printf("{\"total\":%zu,\"one\":%zu,\"two\":%zu,\"with\":%zu,\"after\":%zu,\"prim\":%zu,\"reset\":%zu}\n",
           total, one, two, with, after, prim, reset);
    return 0;
}

static int cmd_vmm(void)
{
    OK(cuInit(0));
    int n;
    OK(cuDeviceGetCount(&n));
    CHECK(n >= 2);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 1;
    size_t gran;
    OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK(gran == (2 << 20));
    /* No context is needed: the device comes from prop->location. */
    CUmemGenericAllocationHandle h, h2, hh;
    RC(cuMemCreate(&h, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemCreate(&h, 4 * gran, &prop, 0));
    CUmemAllocationProp got;
    OK(cuMemGetAllocationPropertiesFromHandle(&got, h));
    CHECK(got.location.id == 1 && got.location.type == CU_MEM_LOCATION_TYPE_DEVICE);
    prop.location.id = 7;
    RC(cuMemCreate(&h2, gran, &prop, 0), CUDA_ERROR_INVALID_DEVICE);
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    prop.location.id = 0;
    OK(cuMemCreate(&hh, 8 * gran, &prop, 0));      /* host memory: no device charge */

    primary(0);
    size_t free0 = free_mem();
    primary(1);
    size_t free1 = free_mem();

    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, 8 * gran, 0, 0, 0));
    OK(cuMemMap(va, 4 * gran, 0, h, 0));
    RC(cuMemMap(va, 2 * gran, 0, h, 0), CUDA_ERROR_ALREADY_MAPPED);
    CUmemAccessDesc acc;
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = 1;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    OK(cuMemSetAccess(va, 4 * gran, &acc, 1));
    RC(cuMemSetAccess(va, 8 * gran, &acc, 1), CUDA_ERROR_INVALID_VALUE);  /* half unmapped */
    CUdeviceptr base; size_t size;
    OK(cuMemGetAddressRange(&base, &size, va + 5));
    CHECK(base == va && size == 4 * gran);
    OK(cuMemcpyHtoD(va + gran, &acc, sizeof acc));
    CUmemGenericAllocationHandle r;
    OK(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(va + gran)));
    CHECK(r == h);
    OK(cuMemRelease(r));
    OK(cuMemRelease(h));                          /* still mapped: still charged */
    size_t mapped = free_mem();
    OK(cuMemUnmap(va, 4 * gran));                 /* now it goes */
    size_t unmapped = free_mem();
    OK(cuMemAddressFree(va, 8 * gran));
    RC(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemRelease(hh));
    OK(cuCtxSetCurrent(NULL));
    primary(0);
    CHECK(free_mem() == free0);
    printf("{\"gran\":%zu,\"free0\":%zu,\"free1\":%zu,\"mapped\":%zu,\"unmapped\":%zu}\n",
           gran, free0, free1, mapped, unmapped);
    return 0;
}

static int cmd_async(void)
{
    OK(cuInit(0));
    primary(0);
    size_t f0 = free_mem();
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a, b;
    OK(cuMemAllocAsync(&a, 3 << 20, s));
    CHECK(free_mem() == f0 - (4 << 20));
    CUmemoryPool pool, cur;
    CUdevice d;
    OK(cuDeviceGet(&d, 0));
    OK(cuDeviceGetDefaultMemPool(&pool, d));
    OK(cuDeviceGetMemPool(&cur, d));
    CHECK(pool == cur);
    cuuint64_t used;
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    CHECK(used == (4 << 20));
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CUmemoryPool mine;
    OK(cuMemPoolCreate(&mine, &props));
    OK(cuMemAllocFromPoolAsync(&b, 1, mine, CU_STREAM_PER_THREAD));
    CHECK(free_mem() == f0 - (6 << 20));
    OK(cuMemFreeAsync(a, s));
    OK(cuMemFreeAsync(b, NULL));
    OK(cuStreamSynchronize(s));
    CHECK(free_mem() == f0);
    OK(cuMemPoolTrimTo(mine, 0));
    OK(cuMemPoolDestroy(mine));
    RC(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);   /* the default pool stays */
    CUmodule mod;
    CUfunction fn;
    OK(cuModuleLoadData(&mod, "any image"));
    OK(cuModuleGetFunction(&fn, mod, "noop"));
    RC(cuLaunchKernel((CUfunction)0x1, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
    OK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
    OK(cuModuleUnload(mod));
    OK(cuStreamDestroy(s));
    RC(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);

    /* Arrays: width x height x depth x channels x bytes, then granularity. */
    CUDA_ARRAY_DESCRIPTOR ad = {.Width = 1024, .Height = 1024, .Format = CU_AD_FORMAT_FLOAT,
                                .NumChannels = 4};
    CUarray arr, arr3;
    OK(cuArrayCreate(&arr, &ad));                  /* 16 MiB */
    CHECK(free_mem() == f0 - (16 << 20));
    CUDA_ARRAY_DESCRIPTOR back;
    OK(cuArrayGetDescriptor(&back, arr));
    CHECK(back.Width == 1024 && back.NumChannels == 4);
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = 100, .Height = 100, .Depth = 100,
                                  .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
    OK(cuArray3DCreate(&arr3, &d3));               /* 1e6 bytes -> 2 MiB */
    CHECK(free_mem() == f0 - (18 << 20));
    CUmipmappedArray mm;
    CUDA_ARRAY3D_DESCRIPTOR md = {.Width = 2048, .Height = 2048,
                                  .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
    OK(cuMipmappedArrayCreate(&mm, &md, 2));       /* 4 MiB + 1 MiB -> 6 MiB */
    CHECK(free_mem() == f0 - (24 << 20));
    ad.NumChannels = 3;
    RC(cuArrayCreate(&arr, &ad), CUDA_ERROR_INVALID_VALUE);
    OK(cuArrayDestroy(arr));
    OK(cuArrayDestroy(arr3));
    OK(cuMipmappedArrayDestroy(mm));
    RC(cuArrayDestroy(arr), CUDA_ERROR_INVALID_HANDLE);
    CHECK(free_mem() == f0);
    printf("ok\n");
    return 0;
}

/* Read "base version flags" lines; print "rc status symbol" per line. */
static int cmd_resolve(void)
{
    char base[256];
    int version;
    unsigned long long flags;
    while (scanf("%255s %d %llu", base, &version, &flags) == 3) {
        void *fn = (void *)1;
        CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)99;
        CUresult rc = cuGetProcAddress(base, &fn, version, flags, &st);
        Dl_info info;
        const char *name = "-";
        if (fn && fn != (void *)1 && dladdr(fn, &info) && info.dli_sname) {
            name = info.dli_sname;
            CHECK(dlsym(lib, name) == fn);          /* the exported function itself */
        } else if (fn) {
            name = fn == (void *)1 ? "untouched" : "?";
        }
        printf("%d %d %s\n", (int)rc, (int)st, name);
    }
    return 0;
}

/* What cudart 12/13 does: dlsym the v1 entry point, ask it for "cuGetProcAddress",
 * then resolve everything through the result. */
static int cmd_bootstrap(void)
{
    CUresult (*gpa_v1)(const char *, void **, int, cuuint64_t) =
        (CUresult (*)(const char *, void **, int, cuuint64_t))sym("cuGetProcAddress");
    void *p;
    OK(gpa_v1("cuGetProcAddress", &p, 12000, 0));
    CHECK(p == sym("cuGetProcAddress_v2"));
    OK(gpa_v1("cuGetProcAddress", &p, 11030, 0));
    CHECK(p == sym("cuGetProcAddress"));
    OK(gpa_v1("cuGetProcAddress", &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
    CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        (CUresult (*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *))p;
    CUdriverProcAddressQueryResult st;
    void *init, *count, *retain, *setcur, *alloc, *freef, *info, *allocasync, *freeasync;
    const cuuint64_t pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    OK(gpa("cuInit", &init, CUDA_VERSION, pt, &st));
    OK(gpa("cuDeviceGetCount", &count, CUDA_VERSION, pt, &st));
    OK(gpa("cuDevicePrimaryCtxRetain", &retain, CUDA_VERSION, pt, &st));
    OK(gpa("cuCtxSetCurrent", &setcur, CUDA_VERSION, pt, &st));
    OK(gpa("cuMemAlloc", &alloc, CUDA_VERSION, pt, &st));
    OK(gpa("cuMemFree", &freef, CUDA_VERSION, pt, &st));
    OK(gpa("cuMemGetInfo", &info, CUDA_VERSION, pt, &st));
    OK(gpa("cuMemAllocAsync", &allocasync, CUDA_VERSION, pt, &st));
    OK(gpa("cuMemFreeAsync", &freeasync, CUDA_VERSION, pt, &st));
    CHECK(alloc == sym("cuMemAlloc_v2") && allocasync == sym("cuMemAllocAsync_ptsz"));
    OK(((CUresult (*)(unsigned))init)(0));
    int n;
    OK(((CUresult (*)(int *))count)(&n));
    CUcontext c;
    OK(((CUresult (*)(CUcontext *, CUdevice))retain)(&c, 0));
    OK(((CUresult (*)(CUcontext))setcur)(c));
    size_t f0, f1, t;
    OK(((CUresult (*)(size_t *, size_t *))info)(&f0, &t));
    CUdeviceptr a, b;
    OK(((CUresult (*)(CUdeviceptr *, size_t))alloc)(&a, 1 << 20));
    typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
    OK(((alloc_async_fn)allocasync)(&b, 1 << 20, CU_STREAM_PER_THREAD));
    OK(((CUresult (*)(size_t *, size_t *))info)(&f1, &t));
    CHECK(f0 - f1 == (4 << 20));
    OK(((CUresult (*)(CUdeviceptr))freef)(a));
    OK(((CUresult (*)(CUdeviceptr, CUstream))freeasync)(b, CU_STREAM_PER_THREAD));
    printf("devices %d\n", n);
    return 0;
}

#define NTHREADS 64
#define PER 8
static CUcontext g_ctx;
static CUdeviceptr g_ptrs[NTHREADS][PER];
static pthread_barrier_t g_bar;

static void *worker(void *arg)
{
    long id = (long)arg;
    OK(cuCtxSetCurrent(g_ctx));
    for (int round = 0; round < 200; round++) {
        CUdeviceptr p;
        OK(cuMemAlloc(&p, (size_t)(1 + (id * 7 + round) % 5) << 20));
        OK(cuMemFree(p));
    }
    for (int i = 0; i < PER; i++)
        OK(cuMemAlloc(&g_ptrs[id][i], (size_t)(i + 1) << 20));
    pthread_barrier_wait(&g_bar);
    pthread_barrier_wait(&g_bar);
    for (int i = 0; i < PER; i++)
        OK(cuMemFree(g_ptrs[id][i]));
    return NULL;
}

static int cmp_ptr(const void *a, const void *b)
{
    CUdeviceptr x = *(const CUdeviceptr *)a, y = *(const CUdeviceptr *)b;
    return x < y ? -1 : x > y;
}

static int cmd_threads(void)
{
    OK(cuInit(0));
    g_ctx = primary(0);
    size_t f0 = free_mem();
    pthread_t t[NTHREADS];
    pthread_barrier_init(&g_bar, NULL, NTHREADS + 1);
    for (long i = 0; i < NTHREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    pthread_barrier_wait(&g_bar);
    /* Every live allocation has its own address range. */
    CUdeviceptr all[NTHREADS * PER];
    memcpy(all, g_ptrs, sizeof all);
    qsort(all, NTHREADS * PER, sizeof *all, cmp_ptr);
    for (int i = 1; i < NTHREADS * PER; i++) {
        CUdeviceptr base; size_t size;
        OK(cuMemGetAddressRange(&base, &size, all[i - 1]));
        CHECK(all[i - 1] + size <= all[i]);
    }
    size_t expect = 0;                             /* (i+1) MiB in 2 MiB granules */
    for (int i = 0; i < PER; i++) expect += (size_t)NTHREADS * (((i + 2) / 2) * 2) << 20;
    CHECK(f0 - free_mem() == expect);
    pthread_barrier_wait(&g_bar);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    CHECK(free_mem() == f0);
    printf("ok\n");
    return 0;
}

/* Allocate and hold until stdin closes (for the cross-process tests). */
static int cmd_hold(long long bytes)
{
    OK(cuInit(0));
    primary(0);
    CUdeviceptr p;
    CUresult rc = cuMemAlloc(&p, (size_t)bytes);
    size_t f, t;
    OK(cuMemGetInfo(&f, &t));
    /* Change this process's other /proc/<pid>/stat fields: liveness must not care. */
    volatile char *junk = malloc(256 << 20);
    CHECK(junk);
    junk[0] = 1;
    printf("%d %zu\n", (int)rc, f);
    fflush(stdout);
    char buf[16];
    while (fread(buf, 1, sizeof buf, stdin) > 0) {}
    return 0;
}

/* After fork the child starts with no driver state and a process slot of its own. */
static int cmd_fork(void)
{
    OK(cuInit(0));
    primary(0);
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 10 << 20));
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        CUdeviceptr q;
        RC(cuMemAlloc(&q, 1), CUDA_ERROR_NOT_INITIALIZED);
        OK(cuInit(0));
        primary(0);
        OK(cuMemAlloc(&q, 20 << 20));
        printf("child %zu\n", free_mem());
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("parent %zu\n", free_mem());
    OK(cuMemFree(p));
    return 0;
}

static int cmd_nvml(void)
{
    printf("%d\n", (int)nvmlInit_v2());
    return 0;
}

int main(int argc, char **argv)
{
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(lib);
    if (argc < 2) return 2;
    const char *c = argv[1];
    if (!strcmp(c, "preinit")) return cmd_preinit();
    if (!strcmp(c, "init")) return cmd_init();
    if (!strcmp(c, "devices")) return cmd_devices();
    if (!strcmp(c, "contexts")) return cmd_contexts();
    if (!strcmp(c, "alloc")) return cmd_alloc();
    if (!strcmp(c, "ctxmem")) return cmd_ctxmem();
    if (!strcmp(c, "vmm")) return cmd_vmm();
    if (!strcmp(c, "async")) return cmd_async();
    if (!strcmp(c, "resolve")) return cmd_resolve();
    if (!strcmp(c, "bootstrap")) return cmd_bootstrap();
    if (!strcmp(c, "threads")) return cmd_threads();
    if (!strcmp(c, "hold") && argc > 2) return cmd_hold(atoll(argv[2]));
    if (!strcmp(c, "nvml")) return cmd_nvml();
    if (!strcmp(c, "fork")) return cmd_fork();
    return 2;
}
