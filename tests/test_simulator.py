"""The GPU simulator (native/sim): libcuda.so.1 and libnvidia-ml.so.1 without a GPU.

Programs written from the real cuda.h are compiled against the simulator and run with
different CGPU_SIM_* environments; NVML is driven through pynvml, as the exporter and the
device plugin drive it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CUDA_VERSION = 13000

PROBE_C = r"""
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

#define CHECK(expr) do { if (!(expr)) { \
    fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #expr); exit(1); } } while (0)
#define OK(call) do { CUresult rc_ = (call); if (rc_ != CUDA_SUCCESS) { \
    fprintf(stderr, "FAIL %s:%d: %s -> %d\n", __FILE__, __LINE__, #call, (int)rc_); \
    exit(1); } } while (0)
#define RC(call, want) do { CUresult rc_ = (call); if (rc_ != (want)) { \
    fprintf(stderr, "FAIL %s:%d: %s -> %d, want %d\n", __FILE__, __LINE__, #call, (int)rc_, \
            (int)(want)); exit(1); } } while (0)

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
    OK(cuLaunchKernel((CUfunction)0x1, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
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
"""

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


# --------------------------------------------------------------------------- fixtures


def _cuda_include() -> Path:
    for base in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", "/usr/local/cuda-13.0"):
        if base and (Path(base) / "include" / "cuda.h").is_file():
            return Path(base) / "include"
    pytest.skip("cuda.h not found (set CUDA_HOME)")


@pytest.fixture(scope="session")
def simlib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The simulator's libraries: the installed ones, else a fresh build of native/sim."""
    try:
        from cgpu.core import paths

        installed = paths.sim_lib_dir()
        if (installed / "libcuda.so.1").is_file() and (installed / "libnvidia-ml.so.1").is_file():
            newest_src = max(p.stat().st_mtime for p in (REPO / "native" / "sim").iterdir())
            if (installed / "libcuda.so.1").stat().st_mtime >= newest_src:
                return installed
    except ImportError:
        pass
    if not shutil.which("cmake"):
        pytest.skip("cmake is needed to build the simulator")
    build = tmp_path_factory.mktemp("simbuild")
    subprocess.run(
        ["cmake", "-S", str(REPO), "-B", str(build)], check=True, stdout=subprocess.DEVNULL
    )
    subprocess.run(
        ["cmake", "--build", str(build), "-j2", "--target", "cgpusim_cuda", "cgpusim_nvml"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return build / "sim"


@pytest.fixture(scope="session")
def probe(tmp_path_factory: pytest.TempPathFactory, simlib: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("a C compiler is needed")
    out = tmp_path_factory.mktemp("probe")
    src = out / "probe.c"
    src.write_text(PROBE_C)
    exe = out / "probe"
    subprocess.run(
        [
            cc,
            "-std=gnu11",
            "-O1",
            "-Wall",
            "-Werror",
            "-Wno-unused-result",
            "-I",
            str(_cuda_include()),
            "-I",
            str(REPO / "native" / "include"),
            str(src),
            "-o",
            str(exe),
            "-L",
            str(simlib),
            "-l:libcuda.so.1",
            "-l:libnvidia-ml.so.1",
            f"-Wl,-rpath,{simlib}",
            "-ldl",
            "-pthread",
        ],
        check=True,
    )
    return exe


def sim_environ(simlib: Path, **sim: object) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CGPU_") and k != "CUDA_VISIBLE_DEVICES"
    }
    env["LD_LIBRARY_PATH"] = str(simlib)
    for key, value in sim.items():
        if key == "cuda_visible_devices":
            env["CUDA_VISIBLE_DEVICES"] = str(value)
        else:
            env[f"CGPU_SIM_{key.upper()}"] = str(value)
    return env


@pytest.fixture
def run(probe: Path, simlib: Path):
    """run("cmd", env vars...) -> CompletedProcess; fails the test on a probe failure."""

    def _run(*args: str, check: bool = True, stdin: str | None = None, **sim: object):
        proc = subprocess.run(
            [str(probe), *args],
            env=sim_environ(simlib, **sim),
            text=True,
            capture_output=True,
            input=stdin,
            timeout=60,
        )
        if check and proc.returncode != 0:
            pytest.fail(f"probe {args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    return _run


def run_py(simlib: Path, code: str, **sim: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=sim_environ(simlib, **sim),
        text=True,
        capture_output=True,
        timeout=60,
    )


def json_out(proc: subprocess.CompletedProcess):
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- CUDA


def exported(lib: Path) -> list[str]:
    if not shutil.which("nm"):
        pytest.skip("nm (binutils) is needed")
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True
    ).stdout
    return [line.split()[-1] for line in out.splitlines() if line.split()]


def test_build_artifacts(simlib: Path) -> None:
    if not shutil.which("readelf"):
        pytest.skip("readelf (binutils) is needed")
    for name, other in (("libcuda.so.1", "libnvidia-ml"), ("libnvidia-ml.so.1", "libcuda")):
        lib = simlib / name
        assert lib.is_file() and not lib.is_symlink()
        dyn = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
        assert f"Library soname: [{name}]" in dyn
        assert other not in dyn  # the two libraries are independent
    names = exported(simlib / "libcuda.so.1")
    assert names and all(n.startswith("cu") for n in names), "only API symbols are exported"
    names = exported(simlib / "libnvidia-ml.so.1")
    assert names and all(n.startswith("nvml") for n in names), "only API symbols are exported"


def test_calls_before_init_and_init_flags(run) -> None:
    out = run("preinit").stdout.split()
    assert out == ["version", "13000", "init", "0", "again", "0"]
    out = run("preinit", driver_version=12040).stdout.split()
    assert out[:2] == ["version", "12040"]


def test_default_device(run) -> None:
    [dev] = json_out(run("devices"))
    assert dev == {
        "name": "cgpu Simulated GPU",
        "uuid": "GPU-5eed0000-0000-4000-8000-000000000000",
        "total": 16 * GiB,
        "total32": 0xFFFFFFFF,
        "cc": "9.0",
        "sms": 132,
        "vmm": 1,
        "pools": 1,
        "bus": "0000:18:00.0",
        "busid": 0x18,
    }


def test_devices_from_env(run) -> None:
    uuids = [
        "GPU-11111111-2222-3333-4444-555555555555",
        "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
        "GPU-ABCDEF01-0000-0000-0000-000000000001",
    ]
    devs = json_out(
        run("devices", devices=3, memory="1GiB,2048MiB,3G", uuids=",".join(uuids), name="Tesla Sim")
    )
    assert [d["uuid"] for d in devs] == ["GPU-" + u[4:].lower() for u in uuids]
    assert [d["total"] for d in devs] == [GiB, 2 * GiB, 3 * GiB]
    assert {d["name"] for d in devs} == {"Tesla Sim"}
    assert len({d["bus"] for d in devs}) == 3
    # One memory value applies to all; the count follows the longest list when unset.
    devs = json_out(run("devices", memory="512MiB", uuids=",".join(uuids[:2])))
    assert [d["total"] for d in devs] == [512 * MiB] * 2
    devs = json_out(run("devices", devices=2))
    assert devs[1]["uuid"] == "GPU-5eed0000-0000-4000-8000-000000000001"


def test_cuda_visible_devices(run) -> None:
    env = {"devices": 3, "memory": "1GiB,2GiB,3GiB"}
    devs = json_out(run("devices", cuda_visible_devices="2,0", **env))
    assert [d["total"] for d in devs] == [3 * GiB, GiB]
    devs = json_out(
        run("devices", cuda_visible_devices="GPU-5eed0000-0000-4000-8000-000000000001", **env)
    )
    assert [d["total"] for d in devs] == [2 * GiB]
    devs = json_out(run("devices", cuda_visible_devices="1,9,0", **env))  # stops at 9
    assert [d["total"] for d in devs] == [2 * GiB]
    assert run("init", cuda_visible_devices="", **env).stdout.strip() == "100"  # NO_DEVICE
    assert run("init", devices=0).stdout.strip() == "100"


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("devices", "17"),
        ("devices", "two"),
        ("memory", "16 parsecs"),
        ("memory", "1GiB,,2GiB"),
        ("memory", "0"),
        ("uuids", "GPU-nothex"),
        (
            "uuids",
            "GPU-5eed0000-0000-4000-8000-000000000000,GPU-5eed0000-0000-4000-8000-000000000000",
        ),
        ("other_used", "20GiB"),
        ("ctx_overhead", "-1"),
        ("granularity", "3MiB"),
        ("driver_version", "thirteen"),
        ("name", ""),
    ],
)
def test_malformed_env(run, var: str, value: str) -> None:
    proc = run("init", **{var: value})
    assert proc.stdout.strip() == "1"  # CUDA_ERROR_INVALID_VALUE
    assert f"CGPU_SIM_{var.upper()}" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run("nvml", **{var: value})
    assert proc.stdout.strip() == "999"  # NVML_ERROR_UNKNOWN
    assert f"CGPU_SIM_{var.upper()}" in proc.stderr


def test_contexts_per_thread(run) -> None:
    assert run("contexts").stdout.strip() == "ok"


def test_alloc_free_reuse_oom(run) -> None:
    r = json_out(run("alloc", memory="1GiB"))
    assert r["total"] == GiB and r["free0"] == GiB
    assert r["free0"] - r["after1"] == 2 * MiB  # 1 byte takes the 2 MiB granule
    assert r["after1"] - r["after3m"] == 4 * MiB
    assert r["premanaged"] - r["managed"] == 6 * MiB  # managed memory is charged too
    assert r["v1"] == 2 * MiB  # legacy cuMemAlloc (32-bit)
    assert r["blocks"] == GiB // (64 * MiB) and r["left"] == 0


def test_granularity_and_other_tenants(run) -> None:
    r = json_out(run("alloc", memory="1GiB", granularity="64KiB", other_used="256MiB"))
    assert r["free0"] == GiB - 256 * MiB
    assert r["free0"] - r["after1"] == 64 * KiB
    assert r["after1"] - r["after3m"] == 3 * MiB
    assert r["premanaged"] - r["managed"] == 5 * MiB
    assert r["v1"] == MiB
    assert r["blocks"] == (GiB - 256 * MiB) // (64 * MiB)


def test_context_overhead_and_ownership(run) -> None:
    r = json_out(run("ctxmem", memory="4GiB", ctx_overhead="300MiB"))
    assert r["total"] == 4 * GiB
    assert r["one"] == 4 * GiB - 300 * MiB  # first context on the device
    assert r["two"] == r["one"]  # charged once per process
    assert r["with"] == r["two"] - 10 * MiB
    assert r["after"] == r["one"]  # destroying c2 freed its memory
    assert r["prim"] == r["one"]
    assert r["reset"] == r["one"]  # reset freed the allocation


def test_vmm(run) -> None:
    r = json_out(run("vmm", devices=2, memory="1GiB"))
    gran = r["gran"]
    assert r["free0"] == GiB  # device 0 untouched
    assert r["free1"] == GiB - 4 * gran  # charged to prop->location.id
    assert r["mapped"] == r["free1"]  # released but mapped: still held
    assert r["unmapped"] == GiB


def test_stream_ordered_pools_and_arrays(run) -> None:
    assert run("async").stdout.strip() == "ok"


def test_threads(run) -> None:
    assert run("threads", memory="80GiB").stdout.strip() == "ok"


def test_fork(run, tmp_path: Path) -> None:
    out = run("fork", memory="1GiB", state=tmp_path / "state").stdout.split()
    # The child sees the parent's 10 MiB and its own 20 MiB; after it exits only the
    # parent's remain.
    assert out == ["child", str(GiB - 30 * MiB), "parent", str(GiB - 10 * MiB)]
    out = run("fork", memory="1GiB").stdout.split()  # no state file: per process
    assert out == ["child", str(GiB - 20 * MiB), "parent", str(GiB - 10 * MiB)]


# --------------------------------------------------------------------------- cuGetProcAddress


def _typedef_variants() -> dict[str, list[tuple[int, str]]]:
    """base -> [(version, suffix)] from cudaTypedefs.h."""
    text = (_cuda_include() / "cudaTypedefs.h").read_text()
    out: dict[str, set[tuple[int, str]]] = {}
    for m in re.finditer(r"\bPFN_(cu[A-Za-z0-9]+(?:_v[0-9]+)*?)_v([0-9]+)(_ptsz|_ptds)?\b", text):
        out.setdefault(m.group(1), set()).add((int(m.group(2)), m.group(3) or ""))
    return {b: sorted(v) for b, v in out.items()}


def _expected(variants: list[tuple[int, str]], base: str, version: int, per_thread: bool):
    """The symbol the real driver serves, by the k-th-variant rule of cudaTypedefs.h."""
    plain = [v for v, s in variants if not s]
    names = {v: base if k == 0 else f"{base}_v{k + 1}" for k, v in enumerate(plain)}
    if per_thread:
        pts = [(v, s) for v, s in variants if s and v <= version]
        if pts:
            v, s = max(pts)
            return names[max(p for p in plain if p <= v)] + s
    ok = [v for v in plain if v <= version]
    return names[max(ok)] if ok else None


def test_get_proc_address_matches_cuda_typedefs(run, simlib: Path) -> None:
    symbols = set(exported(simlib / "libcuda.so.1"))
    typedefs = _typedef_variants()
    bases = sorted(
        b
        for b in typedefs
        if any(s == b or s.startswith(b + "_v") or s in (b + "_ptsz", b + "_ptds") for s in symbols)
    )
    assert {"cuMemAlloc", "cuMemCreate", "cuGetProcAddress", "cuLaunchKernel"} <= set(bases)
    queries, expect = [], []
    for base in bases:
        versions = sorted({v for v, _ in typedefs[base]})
        for version in [versions[0] - 10, *versions, 99999]:
            for flags in (0, 1, 2):
                queries.append(f"{base} {version} {flags}")
                expect.append(_expected(typedefs[base], base, version, flags == 2))
    out = run("resolve", stdin="\n".join(queries) + "\n").stdout.splitlines()
    assert len(out) == len(queries)
    for query, line, want in zip(queries, out, expect, strict=True):
        rc, status, name = line.split()
        if want is None:
            assert (rc, status, name) == ("500", "2", "-"), query  # VERSION_NOT_SUFFICIENT
        else:
            assert (rc, status, name) == ("0", "0", want), query
    # Every exported function is reachable through cuGetProcAddress.
    assert {line.split()[2] for line in out} - {"-"} == symbols


def test_get_proc_address_specific_choices(run) -> None:
    queries = {
        "cuMemAlloc 2000 0": "0 0 cuMemAlloc",
        "cuMemAlloc 3020 0": "0 0 cuMemAlloc_v2",
        "cuMemAlloc 13000 2": "0 0 cuMemAlloc_v2",  # no per-thread variant
        "cuMemAllocAsync 13000 0": "0 0 cuMemAllocAsync",
        "cuMemAllocAsync 13000 1": "0 0 cuMemAllocAsync",
        "cuMemAllocAsync 13000 2": "0 0 cuMemAllocAsync_ptsz",
        "cuMemcpyHtoD 13000 2": "0 0 cuMemcpyHtoD_v2_ptds",
        "cuStreamSynchronize 13000 2": "0 0 cuStreamSynchronize_ptsz",
        "cuCtxCreate 12050 0": "0 0 cuCtxCreate_v4",
        "cuCtxCreate 12040 0": "0 0 cuCtxCreate_v3",
        "cuGetProcAddress 11030 0": "0 0 cuGetProcAddress",
        "cuGetProcAddress 12000 0": "0 0 cuGetProcAddress_v2",
        "cuMemAlloc 1000 0": "500 2 -",  # version not sufficient
        "cuNoSuchFunction 13000 0": "500 1 -",  # symbol not found
        "cuMemAlloc_v2 13000 0": "500 1 -",  # base names only
        "cuMemAlloc 13000 4": "1 99 untouched",  # bad flags: INVALID_VALUE
    }
    out = run("resolve", stdin="\n".join(queries) + "\n").stdout.splitlines()
    assert dict(zip(queries, out, strict=True)) == queries


def test_cudart_style_bootstrap(run) -> None:
    assert run("bootstrap", devices=2).stdout.strip() == "devices 2"


def test_real_cudart_does_not_crash(simlib: Path, tmp_path: Path) -> None:
    """libcudart, if installed, loads the simulator and fails cleanly (no export tables)."""
    cudart = next((p for p in (_cuda_include().parent / "lib64").glob("libcudart.so.*")), None)
    if cudart is None:
        pytest.skip("no libcudart")
    code = f"""
        import ctypes
        rt = ctypes.CDLL({str(cudart)!r})
        n = ctypes.c_int(-1)
        rc = rt.cudaGetDeviceCount(ctypes.byref(n))
        print(rc)
    """
    proc = run_py(simlib, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().isdigit()


# --------------------------------------------------------------------------- NVML


@pytest.fixture(scope="session")
def pynvml_ok() -> None:
    pytest.importorskip("pynvml")


NVML_BASICS = """
    import pynvml as N
    try:
        N.nvmlDeviceGetCount()
    except N.NVMLError_Uninitialized:
        print("uninit ok")
    N.nvmlInit()
    n = N.nvmlDeviceGetCount()
    out = {"count": n, "driver": str(N.nvmlSystemGetDriverVersion()),
           "cuda": N.nvmlSystemGetCudaDriverVersion(), "devs": []}
    def text(v):
        return v.decode() if isinstance(v, bytes) else v
    for i in range(n):
        h = N.nvmlDeviceGetHandleByIndex(i)
        uuid = N.nvmlDeviceGetUUID(h)
        pci = N.nvmlDeviceGetPciInfo(h)
        assert N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByUUID(uuid)) == i
        assert N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByPciBusId(pci.busId)) == i
        m1 = N.nvmlDeviceGetMemoryInfo(h)
        m2 = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
        u = N.nvmlDeviceGetUtilizationRates(h)
        out["devs"].append({
            "uuid": text(uuid), "name": text(N.nvmlDeviceGetName(h)),
            "minor": N.nvmlDeviceGetMinorNumber(h),
            "serial": N.nvmlDeviceGetSerial(h), "busId": text(pci.busId),
            "legacy": text(pci.busIdLegacy),
            "total": m1.total, "used": m1.used, "free": m1.free,
            "v2": [m2.total, m2.reserved, m2.used, m2.free],
            "cc": list(N.nvmlDeviceGetCudaComputeCapability(h)), "util": [u.gpu, u.memory],
            "temp": N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU),
            "power": N.nvmlDeviceGetPowerUsage(h),
            "procs": len(N.nvmlDeviceGetComputeRunningProcesses(h)),
            "events": N.nvmlDeviceGetSupportedEventTypes(h)})
    try:
        N.nvmlDeviceGetHandleByIndex(n)
    except N.NVMLError_InvalidArgument:
        out["bad_index"] = True
    try:
        N.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    except N.NVMLError_NotFound:
        out["bad_uuid"] = True
    N.nvmlShutdown()
    try:
        N.nvmlDeviceGetCount()
    except N.NVMLError_Uninitialized:
        out["after_shutdown"] = True
    import json
    print(json.dumps(out))
"""


def test_nvml_through_pynvml(simlib: Path, pynvml_ok) -> None:
    proc = run_py(simlib, NVML_BASICS, devices=2, memory="8GiB,16GiB", other_used="1GiB,0")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("uninit ok")
    r = json.loads(proc.stdout.splitlines()[-1])
    assert r["count"] == 2 and r["driver"] == "580.00.00-sim" and r["cuda"] == 13000
    assert r["bad_index"] and r["bad_uuid"] and r["after_shutdown"]
    d0, d1 = r["devs"]
    assert d0["uuid"] == "GPU-5eed0000-0000-4000-8000-000000000000"
    assert d0["name"] == "cgpu Simulated GPU" and d0["minor"] == 0 and d1["minor"] == 1
    assert d0["busId"] == "00000000:18:00.0" and d0["legacy"] == "0000:18:00.0"
    assert (d0["total"], d0["used"], d0["free"]) == (8 * GiB, GiB, 7 * GiB)
    assert d0["v2"] == [8 * GiB, 0, GiB, 7 * GiB]
    assert (d1["total"], d1["used"]) == (16 * GiB, 0)
    assert d0["cc"] == [9, 0] and d0["procs"] == 0 and d0["events"] & 0x8
    assert d0["serial"] != d1["serial"]


def test_nvml_memory_v2_version_check(simlib: Path, pynvml_ok) -> None:
    proc = run_py(
        simlib,
        """
        import pynvml as N
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        try:
            N.nvmlDeviceGetMemoryInfo(h, version=1)
        except N.NVMLError_ArgumentVersionMismatch:
            print("mismatch")
    """,
    )
    assert proc.stdout.strip() == "mismatch", proc.stderr


def test_cross_process_usage_via_state_file(
    probe: Path, simlib: Path, tmp_path: Path, pynvml_ok
) -> None:
    state = tmp_path / "sim.state"
    env = sim_environ(simlib, state=state, memory="4GiB", ctx_overhead="100MiB")
    holders = []
    try:
        for size in (300 * MiB, 1 * GiB):
            p = subprocess.Popen(
                [str(probe), "hold", str(size)],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            rc, free = p.stdout.readline().split()
            assert rc == "0"
            holders.append((p, int(free)))
        # The second process saw the first one's memory.
        assert holders[0][1] == 4 * GiB - 100 * MiB - 300 * MiB
        assert holders[1][1] == holders[0][1] - 100 * MiB - 1 * GiB
        code = """
            import json, pynvml as N
            N.nvmlInit()
            h = N.nvmlDeviceGetHandleByIndex(0)
            m = N.nvmlDeviceGetMemoryInfo(h)
            ps = {p.pid: p.usedGpuMemory for p in N.nvmlDeviceGetComputeRunningProcesses(h)}
            ps2 = {p.pid: p.usedGpuMemory for p in N.nvmlDeviceGetComputeRunningProcesses_v2(h)}
            assert ps == ps2
            print(json.dumps({"used": m.used, "procs": {str(k): v for k, v in ps.items()}}))
        """
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=env,
            text=True,
            capture_output=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        r = json.loads(proc.stdout)
        assert r["used"] == 2 * 100 * MiB + 300 * MiB + GiB
        assert r["procs"] == {
            str(holders[0][0].pid): 400 * MiB,
            str(holders[1][0].pid): 100 * MiB + GiB,
        }
        # A killed process's memory returns at once.
        holders[1][0].send_signal(signal.SIGKILL)
        holders[1][0].wait()
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=env,
            text=True,
            capture_output=True,
            timeout=60,
        )
        r = json.loads(proc.stdout)
        assert r["used"] == 400 * MiB and list(r["procs"]) == [str(holders[0][0].pid)]
        # A newcomer that would not fit gets CUDA_ERROR_OUT_OF_MEMORY.
        p = subprocess.run(
            [str(probe), "hold", str(4 * GiB - 500 * MiB + 1)],
            env=env,
            input="",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert p.stdout.split()[0] == "2"
    finally:
        for p, _ in holders:
            if p.poll() is None:
                p.stdin.close()
                p.wait(timeout=10)


def test_xid_fault_injection(simlib: Path, tmp_path: Path, pynvml_ok) -> None:
    faults = tmp_path / "faults"
    faults.write_text("0 13\n")  # before registration: not delivered
    code = f"""
        import json, time, pynvml as N
        N.nvmlInit()
        h0, h1 = N.nvmlDeviceGetHandleByIndex(0), N.nvmlDeviceGetHandleByIndex(1)
        s = N.nvmlEventSetCreate()
        N.nvmlDeviceRegisterEvents(h0, N.nvmlEventTypeXidCriticalError, s)
        N.nvmlDeviceRegisterEvents(h1, N.nvmlEventTypeXidCriticalError, s)
        out = []
        try:
            N.nvmlEventSetWait(s, 50)
        except N.NVMLError_Timeout:
            out.append("timeout")
        with open({str(faults)!r}, "a") as f:
            f.write("1 79\\nGPU-5eed0000-0000-4000-8000-000000000000 48\\n# note\\n9 1\\n0 6")
        for _ in range(2):
            e = N.nvmlEventSetWait(s, 2000)
            assert e.eventType == N.nvmlEventTypeXidCriticalError
            out.append([N.nvmlDeviceGetIndex(e.device), e.eventData])
        try:
            N.nvmlEventSetWait(s, 50)                 # "0 6" has no newline yet
        except N.NVMLError_Timeout:
            out.append("partial")
        with open({str(faults)!r}, "a") as f:
            f.write("3\\n")
        e = N.nvmlEventSetWait(s, 2000)
        out.append([N.nvmlDeviceGetIndex(e.device), e.eventData])
        N.nvmlEventSetFree(s)
        print(json.dumps(out))
    """
    t0 = time.monotonic()
    proc = run_py(simlib, code, devices=2, faults=faults)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["timeout", [1, 79], [0, 48], "partial", [0, 63]]
    assert time.monotonic() - t0 < 10
