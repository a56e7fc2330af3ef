/* Device memory as the host sees it (sim_bytes "host", "errors" and
 * "lazy"): pinned and registered host memory and the pointer attributes of
 * every kind of memory; bad, freed and unmapped pointers and ranges refused,
 * never crashing, with a set queued on freed memory dropped and the host
 * faulting on device memory; and the process's RSS following only the pages
 * touched, given back when device, managed or VMM memory is freed. */
#include "sim_bytes.h"

#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- pinned host memory and pointer attributes ---- */

int cmd_host(void)
{
    CUcontext ctx = setup();
    void *h;
    unsigned flags = 0;
    OK(cuMemHostAlloc(&h, 10000, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_WRITECOMBINED));
    CHECK(((uintptr_t)h & 4095) == 0);
    OK(cuMemHostGetFlags(&flags, (char *)h + 5));
    CHECK(flags == (CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_WRITECOMBINED |
                    CU_MEMHOSTALLOC_DEVICEMAP));
    RC(cuMemHostAlloc(&h, 16, 0x80), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr dp;
    OK(cuMemHostGetDevicePointer(&dp, h, 0));
    CHECK(dp == (CUdeviceptr)(uintptr_t)h);
    RC(cuMemHostGetDevicePointer(&dp, h, 1), CUDA_ERROR_INVALID_VALUE);

    /* Copies with pinned memory, and with its device address. */
    CUdeviceptr d;
    OK(cuMemAlloc(&d, 10000));
    fill(h, 10000, 80);
    OK(cuMemcpyHtoD(d, h, 10000));
    void *h2;
    OK(cuMemAllocHost(&h2, 10000));
    OK(cuMemcpyDtoH(h2, d, 10000));
    CHECK(!memcmp(h, h2, 10000));
    memset(h2, 0, 10000);
    OK(cuMemcpyDtoD((CUdeviceptr)(uintptr_t)h2, d, 10000)); /* pinned memory is mapped */
    CHECK(!memcmp(h, h2, 10000));
    OK(cuMemsetD8((CUdeviceptr)(uintptr_t)h2, 9, 10)); /* and can be set */
    CHECK(((unsigned char *)h2)[9] == 9);

    /* Attributes: pinned host memory */
    unsigned mt = 0;
    void *hp = NULL;
    CUcontext pc = NULL;
    int ord = -1;
    unsigned long long id1 = 0, id2 = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    OK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h + 8));
    CHECK(mt == CU_MEMORYTYPE_HOST);
    OK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, (CUdeviceptr)(uintptr_t)h + 8));
    CHECK(hp == (char *)h + 8);
    OK(cuPointerGetAttribute(&pc, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)(uintptr_t)h));
    CHECK(pc == ctx);
    OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                             (CUdeviceptr)(uintptr_t)h + 8));
    OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)(uintptr_t)h + 8));
    CHECK(start == (CUdeviceptr)(uintptr_t)h && size == 10000);
    OK(cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)h));
    OK(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)(uintptr_t)h2));
    CHECK(id1 && id2 && id1 != id2);

    /* device memory */
    OK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 100));
    CHECK(mt == CU_MEMORYTYPE_DEVICE);
    RC(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d), CUDA_ERROR_INVALID_VALUE);
    OK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
    CHECK(ord == 0);
    OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 100));
    OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 100));
    CHECK(start == d && size == 10000);
    int ipc = 0;
    OK(cuPointerGetAttribute(&ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, d));
    CHECK(ipc == 1);
    RC(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + (4 << 20)),
       CUDA_ERROR_INVALID_VALUE);

    /* managed memory: the host reads and writes it at its address */
    CUdeviceptr m;
    OK(cuMemAllocManaged(&m, 8192, CU_MEM_ATTACH_GLOBAL));
    unsigned managed = 0;
    OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m));
    CHECK(managed == 1);
    OK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, m + 4));
    CHECK(hp == (void *)(uintptr_t)(m + 4));
    unsigned char *mp = (unsigned char *)(uintptr_t)m;
    memset(mp, 0x42, 8192);
    OK(cuMemsetD8(m + 10, 0x43, 1));
    CHECK(mp[10] == 0x43 && mp[11] == 0x42);
    OK(cuMemcpyDtoH(h2, m, 8192));
    CHECK(((unsigned char *)h2)[9] == 0x42 && ((unsigned char *)h2)[10] == 0x43);

    /* registered host memory */
    void *reg = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(reg != MAP_FAILED);
    RC(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)reg),
       CUDA_ERROR_INVALID_VALUE);
    OK(cuMemHostRegister(reg, 1 << 16, CU_MEMHOSTREGISTER_DEVICEMAP));
    RC(cuMemHostRegister((char *)reg + 4096, 4096, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    OK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                             (CUdeviceptr)(uintptr_t)reg + 100));
    CHECK(mt == CU_MEMORYTYPE_HOST);
    OK(cuMemHostGetDevicePointer(&dp, (char *)reg + 100, 0));
    CHECK(dp == (CUdeviceptr)(uintptr_t)reg + 100);
    RC(cuMemHostGetFlags(&flags, reg), CUDA_ERROR_INVALID_VALUE); /* not an allocation */
    RC(cuMemFreeHost(reg), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemHostUnregister((char *)reg + 8), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    OK(cuMemHostUnregister(reg));
    RC(cuMemHostUnregister(reg), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    RC(cuMemHostRegister(NULL, 4096, 0), CUDA_ERROR_INVALID_VALUE);
    munmap(reg, 1 << 16);
    RC(cuMemHostRegister(reg, 1 << 16, 0), CUDA_ERROR_INVALID_VALUE); /* no pages there */
    RC(cuMemHostRegister((void *)(uintptr_t)d, 4096, 0), CUDA_ERROR_INVALID_VALUE);

    /* unregistered host memory: cuPointerGetAttributes reads zeros */
    static char plain[64];
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT,
                                   CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                   CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                   CU_POINTER_ATTRIBUTE_IS_MANAGED};
    unsigned amt = 99, aman = 99;
    CUcontext actx = (CUcontext)1;
    CUdeviceptr adev = 1;
    void *ahost = (void *)1;
    void *data[] = {&amt, &actx, &adev, &ahost, &aman};
    OK(cuPointerGetAttributes(5, attrs, data, (CUdeviceptr)(uintptr_t)plain));
    CHECK(amt == 0 && actx == NULL && adev == 0 && ahost == NULL && aman == 0);
    RC(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)plain),
       CUDA_ERROR_INVALID_VALUE);
    /* ... and device memory fills what it has, NULL for the host pointer */
    ahost = (void *)1;
    OK(cuPointerGetAttributes(5, attrs, data, d));
    CHECK(amt == CU_MEMORYTYPE_DEVICE && actx == ctx && adev == d && ahost == NULL && aman == 0);
    OK(cuPointerGetAttributes(5, attrs, data, m));
    CHECK(amt == CU_MEMORYTYPE_DEVICE && ahost == (void *)(uintptr_t)m && aman == 1);
    CUpointer_attribute bad[] = {(CUpointer_attribute)999};
    RC(cuPointerGetAttributes(1, bad, data, d), CUDA_ERROR_INVALID_VALUE);

    OK(cuMemFreeHost(h));
    RC(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
    RC(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h),
       CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFreeHost(h2));
    puts("ok");
    return 0;
}

/* ---- errors, and device memory is no host memory ---- */

int cmd_errors(void)
{
    setup();
    CUdeviceptr p, q;
    static unsigned char buf[8192];
    OK(cuMemAlloc(&p, 4096));
    OK(cuMemAlloc(&q, 4096));
    RC(cuMemcpyHtoD(0, buf, 16), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemcpyHtoD(0x42, buf, 16), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemcpyHtoD(p, NULL, 16), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemcpyDtoH(NULL, p, 16), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemcpyDtoH(buf, p + (2 << 20) - 8, 16), CUDA_ERROR_INVALID_VALUE); /* runs off the end */
    RC(cuMemcpyDtoD(q, p - 8, 16), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemcpy((CUdeviceptr)(uintptr_t)buf, p + (64 << 20), 16), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemsetD8(0x1000, 0, 16), CUDA_ERROR_INVALID_VALUE);           /* unknown, not pinned */
    RC(cuMemsetD8((CUdeviceptr)(uintptr_t)buf, 0, 16), CUDA_ERROR_INVALID_VALUE); /* pageable */
    RC(cuMemcpyHtoDAsync(p, buf, 16, (CUstream)buf), CUDA_ERROR_INVALID_HANDLE);
    OK(cuMemcpyHtoD(p, buf, 0)); /* nothing to copy */
    /* Unmapped host memory is an error, never a crash. */
    void *gone = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(gone != MAP_FAILED);
    munmap(gone, 8192);
    RC(cuMemcpyHtoD(p, gone, 16), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemcpyDtoH(gone, p, 16), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemcpyHtoDAsync(p, gone, 16, NULL), CUDA_ERROR_INVALID_VALUE);
    RC(cuMemcpy((CUdeviceptr)(uintptr_t)buf, (CUdeviceptr)(uintptr_t)gone, 16),
       CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(p));
    RC(cuMemcpyHtoD(p, buf, 16), CUDA_ERROR_INVALID_VALUE);             /* freed */
    RC(cuMemcpyDtoH(buf, p, 16), CUDA_ERROR_INVALID_VALUE);
    /* A copy queued behind a kernel whose memory is freed first is dropped,
     * never run on the freed range. */
    CUstream s;
    OK(cuStreamCreate(&s, 0));
    busy(s, 50);
    OK(cuMemsetD8Async(q, 1, 4096, s));
    OK(cuMemFree(q));
    CUdeviceptr filler, q2;
    OK(cuMemAlloc(&filler, 4096)); /* takes p's old place */
    OK(cuMemAlloc(&q2, 4096));
    CHECK(q2 == q); /* the address is given out again, lowest first */
    CUstream idle;
    OK(cuStreamCreate(&idle, CU_STREAM_NON_BLOCKING));
    OK(cuMemsetD8Async(q2, 2, 4096, idle)); /* runs now, before the queued set's time */
    OK(cuStreamSynchronize(s));
    OK(cuMemcpyDtoH(buf, q2, 4096));
    CHECK(buf[0] == 2 && buf[4095] == 2); /* the old set did not land in the new memory */
    /* The host faults on device memory, as on a GPU. */
    CUdeviceptr r;
    OK(cuMemAlloc(&r, 4096));
    pid_t pid = fork();
    if (!pid) {
        volatile unsigned char *hp = (unsigned char *)(uintptr_t)r;
        (void)hp[0];
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    puts("ok");
    return 0;
}

/* ---- lazy backing: RSS follows the pages touched ---- */

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6))
            v = atol(line + 6);
    if (f)
        fclose(f);
    return v;
}

int cmd_lazy(int argc, char **argv)
{
    setup();
    unsigned long long big = argc > 2 ? strtoull(argv[2], NULL, 0) : (60ULL << 30);
    unsigned long long touch = argc > 3 ? strtoull(argv[3], NULL, 0) : (64ULL << 20);
    long r0 = rss_kib();
    CUdeviceptr p;
    OK(cuMemAlloc(&p, big));
    long r1 = rss_kib();
    OK(cuMemsetD8(p + big / 2, 0xAB, touch));
    unsigned char b = 0;
    OK(cuMemcpyDtoH(&b, p + big / 2 + touch - 1, 1));
    CHECK(b == 0xAB);
    long r2 = rss_kib();
    OK(cuMemFree(p));
    long r3 = rss_kib();
    /* managed memory the host touches, then frees */
    CUdeviceptr m;
    OK(cuMemAllocManaged(&m, big, CU_MEM_ATTACH_GLOBAL));
    memset((void *)(uintptr_t)m, 1, touch);
    long r4 = rss_kib();
    OK(cuMemFree(m));
    long r5 = rss_kib();
    /* a VMM handle: its pages go when it is released and unmapped */
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    size_t gran;
    OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    unsigned long long vsize = (touch + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    OK(cuMemCreate(&h, vsize, &prop, 0));
    OK(cuMemAddressReserve(&va, vsize, 0, 0, 0));
    OK(cuMemMap(va, vsize, 0, h, 0));
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    OK(cuMemSetAccess(va, vsize, &acc, 1));
    OK(cuMemsetD8(va, 3, touch));
    long r6 = rss_kib();
    OK(cuMemUnmap(va, vsize));
    OK(cuMemRelease(h));
    long r7 = rss_kib();
    printf("{\"start\": %ld, \"allocated\": %ld, \"touched\": %ld, \"freed\": %ld, "
           "\"managed_touched\": %ld, \"managed_freed\": %ld, \"vmm_touched\": %ld, "
           "\"vmm_released\": %ld}\n", r0, r1, r2, r3, r4, r5, r6, r7);
    return 0;
}
