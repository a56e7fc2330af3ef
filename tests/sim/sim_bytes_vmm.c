/* Memory reached through more than one address or process (sim_bytes
 * "vmm", "vmmshare" and "ipc"): VMM mappings of one handle share bytes, need
 * cuMemSetAccess, survive the handle's release and scale to thousands of
 * handles side by side; a handle exported as a file descriptor maps the same
 * bytes in a forked process; and a process that opens an IPC handle reads and
 * writes the exporter's bytes, while a forked child loses managed memory. */
#include "sim_bytes.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- VMM ---- */

int cmd_vmm(void)
{
    setup();
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
    size_t gran;
    OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemGenericAllocationHandle h1, h2;
    OK(cuMemCreate(&h1, gran, &prop, 0));
    OK(cuMemCreate(&h2, gran, &prop, 0));
    CUdeviceptr va, vb;
    OK(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
    OK(cuMemAddressReserve(&vb, gran, 0, 0, 0));
    /* h1 at va and at vb: one allocation, two addresses */
    OK(cuMemMap(va, gran, 0, h1, 0));
    OK(cuMemMap(vb, gran, 0, h1, 0));
    OK(cuMemMap(va + gran, gran, 0, h2, 0));
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    static unsigned char in[4096], out[4096];
    fill(in, sizeof in, 70);
    /* No device may touch a mapping before cuMemSetAccess. */
    RC(cuMemcpyHtoD(va + 100, in, sizeof in), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemSetAccess(va, 2 * gran, &acc, 1));
    CUmemAccessDesc ro = acc;
    ro.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    OK(cuMemSetAccess(vb, gran, &ro, 1));
    RC(cuMemsetD8(vb, 0, 16), CUDA_ERROR_INVALID_VALUE); /* read-only */
    OK(cuMemcpyDtoH(out, vb, 16));
    OK(cuMemSetAccess(vb, gran, &acc, 1));
    OK(cuMemcpyHtoD(va + 100, in, sizeof in));
    OK(cuMemcpyDtoH(out, vb + 100, sizeof out));
    CHECK(!memcmp(in, out, sizeof in));
    OK(cuMemsetD8(vb, 0x77, 16));
    OK(cuMemcpyDtoH(out, va, 16));
    CHECK(out[0] == 0x77 && out[15] == 0x77);
    /* a copy across the boundary of two handles mapped side by side */
    OK(cuMemcpyHtoD(va + gran - 2048, in, sizeof in));
    memset(out, 0, sizeof out);
    OK(cuMemcpyDtoH(out, va + gran - 2048, sizeof out));
    CHECK(!memcmp(in, out, sizeof in));
    /* pointer attributes of a mapping: the range is the reservation */
    CUdeviceptr start = 0;
    size_t size = 0;
    unsigned long long types = 0;
    OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + gran + 5));
    OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + gran + 5));
    OK(cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, va + 5));
    CHECK(start == va && size == 2 * gran && types == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, va + gran + 5));
    CHECK(size == gran);
    /* the handle survives one mapping going and its release */
    OK(cuMemUnmap(va, gran));
    OK(cuMemRelease(h1));
    memset(out, 0, sizeof out);
    OK(cuMemcpyDtoH(out, vb + 100, 64));
    CHECK(!memcmp(out, in, 64));
    RC(cuMemcpyDtoH(out, va, 16), CUDA_ERROR_INVALID_VALUE); /* unmapped now */
    /* a new handle mapped where h1 was starts from zero */
    CUmemGenericAllocationHandle h3;
    OK(cuMemCreate(&h3, gran, &prop, 0));
    OK(cuMemMap(va, gran, 0, h3, 0));
    RC(cuMemcpyDtoH(out, va, 16), CUDA_ERROR_INVALID_VALUE); /* a new mapping: no access yet */
    OK(cuMemSetAccess(va, gran, &acc, 1));
    OK(cuMemcpyDtoH(out, va, 16));
    for (int i = 0; i < 16; i++)
        CHECK(out[i] == 0);
    OK(cuMemUnmap(va, 2 * gran));
    OK(cuMemUnmap(vb, gran));
    OK(cuMemRelease(h2));
    OK(cuMemRelease(h3));
    OK(cuMemAddressFree(va, 2 * gran));
    OK(cuMemAddressFree(vb, gran));

    /* Thousands of handles mapped side by side, as PyTorch's expandable
     * segments grow, with few file descriptors to spare. */
    struct rlimit rl = {256, 256};
    CHECK(!setrlimit(RLIMIT_NOFILE, &rl));
    enum { MANY = 3000 };
    static CUmemGenericAllocationHandle hs[MANY];
    CUdeviceptr seg;
    OK(cuMemAddressReserve(&seg, MANY * gran, 0, 0, 0));
    for (int i = 0; i < MANY; i++) {
        OK(cuMemCreate(&hs[i], gran, &prop, 0));
        OK(cuMemMap(seg + i * gran, gran, 0, hs[i], 0));
        OK(cuMemRelease(hs[i])); /* the mapping keeps it */
    }
    OK(cuMemSetAccess(seg, MANY * gran, &acc, 1));
    OK(cuMemcpyHtoD(seg + 1234 * gran - 100, in, sizeof in));
    memset(out, 0, sizeof out);
    OK(cuMemcpyDtoH(out, seg + 1234 * gran - 100, sizeof out));
    CHECK(!memcmp(in, out, sizeof in));
    OK(cuMemUnmap(seg, MANY * gran));
    OK(cuMemAddressFree(seg, MANY * gran));
    puts("ok");
    return 0;
}

/* ---- VMM shareable handles: another process maps the same bytes ---- */

int cmd_vmmshare(void)
{
    setup();
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    size_t gran;
    OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemGenericAllocationHandle h, plain, back;
    OK(cuMemCreate(&h, 2 * gran, &prop, 0));
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, 2 * gran, 0, 0, 0));
    OK(cuMemMap(va, 2 * gran, 0, h, 0));
    OK(cuMemSetAccess(va, 2 * gran, &acc, 1));
    static unsigned char in[8192], out[8192];
    fill(in, sizeof in, 95);
    OK(cuMemcpyHtoD(va + gran - 4096, in, sizeof in)); /* before the export */
    int fd = -1;
    RC(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0),
       CUDA_ERROR_NOT_SUPPORTED);
    OK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CHECK(fd >= 0);
    /* the mapping still shows the bytes, now from the shared file */
    OK(cuMemcpyDtoH(out, va + gran - 4096, sizeof out));
    CHECK(!memcmp(in, out, sizeof out));
    prop.requestedHandleTypes = 0;
    OK(cuMemCreate(&plain, gran, &prop, 0));
    int fd2;
    RC(cuMemExportToShareableHandle(&fd2, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
       CUDA_ERROR_INVALID_VALUE); /* not asked for at cuMemCreate */
    int other = memfd_create("not-cuda", 0);
    CHECK(other >= 0 && !ftruncate(other, 4 * gran));
    RC(cuMemImportFromShareableHandle(&back, (void *)(intptr_t)other,
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
       CUDA_ERROR_INVALID_VALUE); /* a file, but no memory this driver exported */
    close(other);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (!pid) {
        setup();
        CUmemGenericAllocationHandle imp;
        OK(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
        close(fd);
        CUmemAllocationProp got;
        OK(cuMemGetAllocationPropertiesFromHandle(&got, imp));
        CHECK(got.location.id == 0 &&
              got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        CUdeviceptr vb;
        OK(cuMemAddressReserve(&vb, 2 * gran, 0, 0, 0));
        OK(cuMemMap(vb, 2 * gran, 0, imp, 0));
        OK(cuMemSetAccess(vb, 2 * gran, &acc, 1));
        OK(cuMemcpyDtoH(out, vb + gran - 4096, sizeof out));
        CHECK(!memcmp(in, out, sizeof out));
        OK(cuMemsetD8(vb, 0x5E, 4));
        OK(cuMemUnmap(vb, 2 * gran));
        OK(cuMemRelease(imp));
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    OK(cuMemcpyDtoH(out, va, 8));
    CHECK(out[0] == 0x5E && out[3] == 0x5E && out[4] == 0);
    close(fd);
    OK(cuMemUnmap(va, 2 * gran));
    OK(cuMemRelease(h));
    OK(cuMemRelease(plain));
    puts("ok");
    return 0;
}

/* ---- IPC: the importer sees the exporter's bytes ---- */

int cmd_ipc(void)
{
    setup();
    enum { B = 1 << 20 };
    static unsigned char in[B], out[B];
    CUdeviceptr p;
    OK(cuMemAlloc(&p, B));
    fill(in, B, 90);
    OK(cuMemcpyHtoD(p, in, B));
    CUipcMemHandle h;
    OK(cuIpcGetMemHandle(&h, p));
    CUdeviceptr managed;
    OK(cuMemAllocManaged(&managed, 4096, CU_MEM_ATTACH_GLOBAL));
    *(unsigned char *)(uintptr_t)managed = 7;
    fflush(stdout);
    int st;
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (!pid) {
        /* A forked child loses its parent's managed memory at once. */
        pid_t g = fork();
        if (!g) {
            volatile unsigned char *mp = (unsigned char *)(uintptr_t)managed;
            mp[0] = 1;
            _exit(0);
        }
        CHECK(waitpid(g, &st, 0) == g && WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
        setup(); /* a forked child starts over */
        CUdeviceptr q;
        OK(cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
        OK(cuMemcpyDtoH(out, q, B));
        CHECK(!memcmp(in, out, B));
        OK(cuMemsetD8(q + 10, 0xC3, 5));
        OK(cuIpcCloseMemHandle(q));
        _exit(0);
    }
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    OK(cuMemcpyDtoH(out, p, B));
    CHECK(out[9] == in[9] && out[10] == 0xC3 && out[14] == 0xC3 && out[15] == in[15]);
    CHECK(*(unsigned char *)(uintptr_t)managed == 7); /* untouched by the children */
    puts("ok");
    return 0;
}
