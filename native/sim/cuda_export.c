/* The simulated CUDA driver (libcuda.so.1).  cuGetExportTable: the driver's
 * private tables, which NVIDIA's CUDA runtime (libcudart 12 and 13) asks for
 * at start-up and uses for module loading, context-local storage and an
 * integrity check.
 *
 * A table is an array of pointers; most begin with their own size in bytes.
 * The ids, slots and the integrity-check algorithm are those the ZLUDA
 * project documents (dark_api/src/lib.rs, zluda/src/impl/driver.rs).  Slots
 * whose meaning is unknown hold a stub that returns CUDA_ERROR_NOT_SUPPORTED
 * and, with CGPU_SIM_TRACE=1, logs "<table> slot <n>: not modelled", which
 * shows what a new runtime calls.  An unknown id gets CUDA_ERROR_NOT_SUPPORTED,
 * as it does from the real driver; the runtime goes on without such a table. */
#include "cuda_sim.h"

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Unmodelled slots                                                          */

static CUresult slot_unmodelled(const char *table, int slot)
{
    if (trace_on())
        fprintf(stderr, "cgpu-sim: cuGetExportTable %s slot %d: not modelled\n", table, slot);
    return CUDA_ERROR_NOT_SUPPORTED;
}

#define STUB(tab, n)                                  \
    static CUresult tab##_##n(void)                   \
    {                                                 \
        return slot_unmodelled(#tab, n);              \
    }

STUB(cudart, 3) STUB(cudart, 4) STUB(cudart, 5) STUB(cudart, 9) STUB(cudart, 10) STUB(cudart, 11)
STUB(tls, 1) STUB(tls, 3)
STUB(hooks, 1) STUB(hooks, 3) STUB(hooks, 4) STUB(hooks, 5)
STUB(cls, 3)
STUB(heap, 1) STUB(heap, 2)
STUB(devext, 1) STUB(devext, 2) STUB(devext, 3) STUB(devext, 4) STUB(devext, 5) STUB(devext, 6)
STUB(devext, 7) STUB(devext, 8) STUB(devext, 9) STUB(devext, 10) STUB(devext, 11) STUB(devext, 12)
STUB(devext, 14) STUB(devext, 15) STUB(devext, 16) STUB(devext, 17) STUB(devext, 18)
STUB(devext, 19) STUB(devext, 20) STUB(devext, 21) STUB(devext, 22) STUB(devext, 23)
STUB(devext, 24) STUB(devext, 25)
STUB(integrity, 2)
STUB(topology, 1) STUB(topology, 2) STUB(topology, 3) STUB(topology, 4) STUB(topology, 5)
STUB(topology, 6) STUB(topology, 7) STUB(topology, 8)
STUB(ctxcheck, 1)
STUB(rttools, 1) STUB(rttools, 2) STUB(rttools, 3) STUB(rttools, 5)
STUB(rttools, 6) STUB(rttools, 7) STUB(rttools, 8) STUB(rttools, 9) STUB(rttools, 10)
STUB(rttools, 11) STUB(rttools, 12) STUB(rttools, 13) STUB(rttools, 14) STUB(rttools, 15)
STUB(rttools, 16) STUB(rttools, 17) STUB(rttools, 18) STUB(rttools, 19) STUB(rttools, 20)
STUB(rttools, 21) STUB(rttools, 22) STUB(rttools, 23) STUB(rttools, 24) STUB(rttools, 25)
STUB(rttools, 26) STUB(rttools, 27) STUB(rttools, 28) STUB(rttools, 29) STUB(rttools, 30)
STUB(rttools, 31) STUB(rttools, 32) STUB(rttools, 33) STUB(rttools, 34) STUB(rttools, 35)
STUB(rttools, 36) STUB(rttools, 37) STUB(rttools, 38) STUB(rttools, 39) STUB(rttools, 40)
STUB(rttools, 41) STUB(rttools, 42) STUB(rttools, 43) STUB(rttools, 44) STUB(rttools, 45)
STUB(rttools, 46) STUB(rttools, 47) STUB(rttools, 48) STUB(rttools, 49) STUB(rttools, 50)
STUB(rttools, 51)

/* ------------------------------------------------------------------------ */
/* The runtime's interface: modules from fat binaries, primary contexts      */

static CUresult load_wrapper(CUmodule *module, const struct fatbinc_wrapper *w)
{
    if (!module || !w)
        return CUDA_ERROR_INVALID_VALUE;
    if (w->magic != FATBINC_MAGIC || (w->version != 1 && w->version != 2))
        return CUDA_ERROR_INVALID_IMAGE;
    return module_load_image(module, w);
}

static CUresult cudart_module_from_fatbinc(CUmodule *module, const struct fatbinc_wrapper *w)
{
    return load_wrapper(module, w);
}

static CUresult cudart_module_from_fatbinc_ext(CUmodule *module, const struct fatbinc_wrapper *w,
                                               void *a3, void *a4, unsigned a5)
{
    return load_wrapper(module, w);
}

static CUresult cudart_module_from_fatbin(const void *fatbin, CUmodule *module, void *a3, void *a4,
                                          unsigned a5)
{
    if (!module || !fatbin)
        return CUDA_ERROR_INVALID_VALUE;
    if (*(const unsigned *)fatbin != FATBIN_MAGIC)
        return CUDA_ERROR_INVALID_IMAGE;
    return module_load_image(module, fatbin);
}

/* The device's primary context, created inactive if it does not exist yet:
 * the same handle cuDevicePrimaryCtxRetain returns later. */
static CUresult cudart_primary_ctx(CUcontext *pctx, CUdevice dev)
{
    NEED_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    return primary_ctx_handle(dev, pctx);
}

static void cudart_slot7(size_t arg) {}

/* Slot 12 loads the PTX compiler and NVVM in the real driver: nothing to load. */
static CUresult cudart_load_compilers(void) { return CUDA_SUCCESS; }

static const void *const cudart_table[13] = {
    (const void *)(13 * sizeof(void *)),
    (const void *)cudart_module_from_fatbinc,
    (const void *)cudart_primary_ctx,
    (const void *)cudart_3,
    (const void *)cudart_4,
    (const void *)cudart_5,
    (const void *)cudart_module_from_fatbinc_ext,
    (const void *)cudart_slot7,
    (const void *)cudart_module_from_fatbin,
    (const void *)cudart_9,
    (const void *)cudart_10,
    (const void *)cudart_11,
    (const void *)cudart_load_compilers,
};

/* ------------------------------------------------------------------------ */
/* Tools: thread-local storage and the runtime's callback buffers            */

/* Slot 2: the calling thread's current context (cuBLASLt 13 keys its per-context state by
 * it and by its id, runtime tools slot 4). */
static CUresult tls_current_ctx(CUcontext *ctx) { return cuCtxGetCurrent(ctx); }

static const void *const tls_table[4] = {
    (const void *)(4 * sizeof(void *)), (const void *)tls_1, (const void *)tls_current_ctx,
    (const void *)tls_3,
};

static unsigned hook_buffer1[1024];
static unsigned hook_buffer2[14];

static void hooks_buffer1(void **ptr, size_t *size)
{
    *ptr = hook_buffer1;
    *size = sizeof hook_buffer1 / sizeof *hook_buffer1;
}

static void hooks_buffer2(void **ptr, size_t *size)
{
    *ptr = hook_buffer2;
    *size = sizeof hook_buffer2 / sizeof *hook_buffer2;
}

static const void *const hooks_table[7] = {
    (const void *)(7 * sizeof(void *)), (const void *)hooks_1,  (const void *)hooks_buffer1,
    (const void *)hooks_3,              (const void *)hooks_4,  (const void *)hooks_5,
    (const void *)hooks_buffer2,
};

/* ------------------------------------------------------------------------ */
/* Context-local storage: a value per (context, key), with a destructor the  */
/* driver calls when the context goes (destroy, last release, reset).        */

static CUresult cls_ctx(CUcontext ctx, struct sim_ctx **out)
{
    if (ctx)
        return ctx_lookup_alive(ctx, out);
    return cur_ctx(out);
}

static CUresult cls_put(CUcontext ctx, void *key, void *value, cls_dtor dtor)
{
    struct sim_ctx *c;
    CUresult rc = cls_ctx(ctx, &c);
    if (rc)
        return rc;
    LOCK();
    struct sim_cls *e = c->cls;
    while (e && e->key != key)
        e = e->next;
    if (!e) {
        e = calloc(1, sizeof *e);
        if (!e) {
            UNLOCK();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        e->key = key;
        e->next = c->cls;
        c->cls = e;
    }
    e->value = value;
    e->dtor = (void (*)(void))dtor;
    UNLOCK();
    return CUDA_SUCCESS;
}

static CUresult cls_delete(CUcontext ctx, void *key)
{
    struct sim_ctx *c;
    CUresult rc = cls_ctx(ctx, &c);
    if (rc)
        return rc;
    LOCK();
    for (struct sim_cls **p = &c->cls; *p; p = &(*p)->next)
        if ((*p)->key == key) {
            struct sim_cls *e = *p;
            *p = e->next;
            free(e);
            break;
        }
    UNLOCK();
    return CUDA_SUCCESS;
}

static CUresult cls_get(void **value, CUcontext ctx, void *key)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c;
    CUresult rc = cls_ctx(ctx, &c);
    if (rc)
        return rc;
    rc = CUDA_ERROR_INVALID_HANDLE;
    LOCK();
    for (struct sim_cls *e = c->cls; e; e = e->next)
        if (e->key == key) {
            *value = e->value;
            rc = CUDA_SUCCESS;
            break;
        }
    UNLOCK();
    return rc;
}

static const void *const cls_table[4] = {
    (const void *)cls_put, (const void *)cls_delete, (const void *)cls_get, (const void *)cls_3,
};

/* ------------------------------------------------------------------------ */
/* Context creation that bypasses the runtime's checks; heap access          */

static CUresult ctx_create_bypass(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    return cuCtxCreate_v2(pctx, flags, dev);
}

static const void *const bypass_table[2] = {
    (const void *)(2 * sizeof(void *)), (const void *)ctx_create_bypass,
};

static const void *const heap_table[3] = {
    (const void *)(3 * sizeof(void *)), (const void *)heap_1, (const void *)heap_2,
};

/* ------------------------------------------------------------------------ */
/* Extended device queries                                                   */

/* Slot 13: a per-device flag that real drivers report as 0. */
static CUresult devext_flag(unsigned char *result, CUdevice dev)
{
    NEED_INIT();
    if (!result)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev_phys(dev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *result = 0;
    return CUDA_SUCCESS;
}

static const void *const devext_table[26] = {
    (const void *)(26 * sizeof(void *)),
    (const void *)devext_1,  (const void *)devext_2,  (const void *)devext_3,
    (const void *)devext_4,  (const void *)devext_5,  (const void *)devext_6,
    (const void *)devext_7,  (const void *)devext_8,  (const void *)devext_9,
    (const void *)devext_10, (const void *)devext_11, (const void *)devext_12,
    (const void *)devext_flag, (const void *)devext_14, (const void *)devext_15,
    (const void *)devext_16, (const void *)devext_17, (const void *)devext_18,
    (const void *)devext_19, (const void *)devext_20, (const void *)devext_21,
    (const void *)devext_22, (const void *)devext_23, (const void *)devext_24,
    (const void *)devext_25,
};

/* ------------------------------------------------------------------------ */
/* Context checks                                                            */

static CUresult ctxcheck_check(CUcontext ctx, unsigned *result1, const void **result2)
{
    if (result1)
        *result1 = 0;
    return CUDA_SUCCESS;
}

static unsigned ctxcheck_flag(void) { return 0; }

static const void *const ctxcheck_table[4] = {
    (const void *)(4 * sizeof(void *)), (const void *)ctxcheck_1,
    (const void *)ctxcheck_check, (const void *)ctxcheck_flag,
};

/* ------------------------------------------------------------------------ */
/* A table libcudart 13.5 requires at start (it fails with the driver's error */
/* when the table is missing; 13.0 never asks for it).  Its only calls found  */
/* in libcudart 13.5.37 are slots 39 and 51, on the path of the runtime's     */
/* callbacks to profiling tools, which the hooks' zeroed buffers keep off.    */
/* Every slot is a stub; slot 0 holds the size, as in the other tables.       */

/* Slot 4: a context's unique id, as cuCtxGetId (cuBLASLt 13, with tools TLS slot 2). */
static CUresult rttools_ctx_id(CUcontext ctx, unsigned long long *id) { return cuCtxGetId(ctx, id); }

static const void *const rttools_table[52] = {
    (const void *)(52 * sizeof(void *)),
    (const void *)rttools_1,
    (const void *)rttools_2,
    (const void *)rttools_3,
    (const void *)rttools_ctx_id,
    (const void *)rttools_5,
    (const void *)rttools_6,
    (const void *)rttools_7,
    (const void *)rttools_8,
    (const void *)rttools_9,
    (const void *)rttools_10,
    (const void *)rttools_11,
    (const void *)rttools_12,
    (const void *)rttools_13,
    (const void *)rttools_14,
    (const void *)rttools_15,
    (const void *)rttools_16,
    (const void *)rttools_17,
    (const void *)rttools_18,
    (const void *)rttools_19,
    (const void *)rttools_20,
    (const void *)rttools_21,
    (const void *)rttools_22,
    (const void *)rttools_23,
    (const void *)rttools_24,
    (const void *)rttools_25,
    (const void *)rttools_26,
    (const void *)rttools_27,
    (const void *)rttools_28,
    (const void *)rttools_29,
    (const void *)rttools_30,
    (const void *)rttools_31,
    (const void *)rttools_32,
    (const void *)rttools_33,
    (const void *)rttools_34,
    (const void *)rttools_35,
    (const void *)rttools_36,
    (const void *)rttools_37,
    (const void *)rttools_38,
    (const void *)rttools_39,
    (const void *)rttools_40,
    (const void *)rttools_41,
    (const void *)rttools_42,
    (const void *)rttools_43,
    (const void *)rttools_44,
    (const void *)rttools_45,
    (const void *)rttools_46,
    (const void *)rttools_47,
    (const void *)rttools_48,
    (const void *)rttools_49,
    (const void *)rttools_50,
    (const void *)rttools_51,
};

/* ------------------------------------------------------------------------ */
/* The integrity check                                                       */

static CUresult integrity_check(unsigned version, unsigned long long unix_seconds,
                                unsigned long long result[2]);

static const void *const integrity_table[3] = {
    (const void *)(3 * sizeof(void *)), (const void *)integrity_check,
    (const void *)integrity_2,
};

/* The digest is HMAC-MD2 (RFC 1319, RFC 2104; MD2's block is 16 bytes) under
 * a fixed key, over what binds the answer to this driver, process, thread
 * and set of devices: the runtime computes the same and compares. */
static const unsigned char md2_s[256] = {
    0x29, 0x2e, 0x43, 0xc9, 0xa2, 0xd8, 0x7c, 0x01, 0x3d, 0x36, 0x54, 0xa1, 0xec, 0xf0, 0x06, 0x13,
    0x62, 0xa7, 0x05, 0xf3, 0xc0, 0xc7, 0x73, 0x8c, 0x98, 0x93, 0x2b, 0xd9, 0xbc, 0x4c, 0x82, 0xca,
    0x1e, 0x9b, 0x57, 0x3c, 0xfd, 0xd4, 0xe0, 0x16, 0x67, 0x42, 0x6f, 0x18, 0x8a, 0x17, 0xe5, 0x12,
    0xbe, 0x4e, 0xc4, 0xd6, 0xda, 0x9e, 0xde, 0x49, 0xa0, 0xfb, 0xf5, 0x8e, 0xbb, 0x2f, 0xee, 0x7a,
    0xa9, 0x68, 0x79, 0x91, 0x15, 0xb2, 0x07, 0x3f, 0x94, 0xc2, 0x10, 0x89, 0x0b, 0x22, 0x5f, 0x21,
    0x80, 0x7f, 0x5d, 0x9a, 0x5a, 0x90, 0x32, 0x27, 0x35, 0x3e, 0xcc, 0xe7, 0xbf, 0xf7, 0x97, 0x03,
    0xff, 0x19, 0x30, 0xb3, 0x48, 0xa5, 0xb5, 0xd1, 0xd7, 0x5e, 0x92, 0x2a, 0xac, 0x56, 0xaa, 0xc6,
    0x4f, 0xb8, 0x38, 0xd2, 0x96, 0xa4, 0x7d, 0xb6, 0x76, 0xfc, 0x6b, 0xe2, 0x9c, 0x74, 0x04, 0xf1,
    0x45, 0x9d, 0x70, 0x59, 0x64, 0x71, 0x87, 0x20, 0x86, 0x5b, 0xcf, 0x65, 0xe6, 0x2d, 0xa8, 0x02,
    0x1b, 0x60, 0x25, 0xad, 0xae, 0xb0, 0xb9, 0xf6, 0x1c, 0x46, 0x61, 0x69, 0x34, 0x40, 0x7e, 0x0f,
    0x55, 0x47, 0xa3, 0x23, 0xdd, 0x51, 0xaf, 0x3a, 0xc3, 0x5c, 0xf9, 0xce, 0xba, 0xc5, 0xea, 0x26,
    0x2c, 0x53, 0x0d, 0x6e, 0x85, 0x28, 0x84, 0x09, 0xd3, 0xdf, 0xcd, 0xf4, 0x41, 0x81, 0x4d, 0x52,
    0x6a, 0xdc, 0x37, 0xc8, 0x6c, 0xc1, 0xab, 0xfa, 0x24, 0xe1, 0x7b, 0x08, 0x0c, 0xbd, 0xb1, 0x4a,
    0x78, 0x88, 0x95, 0x8b, 0xe3, 0x63, 0xe8, 0x6d, 0xe9, 0xcb, 0xd5, 0xfe, 0x3b, 0x00, 0x1d, 0x39,
    0xf2, 0xef, 0xb7, 0x0e, 0x66, 0x58, 0xd0, 0xe4, 0xa6, 0x77, 0x72, 0xf8, 0xeb, 0x75, 0x4b, 0x0a,
    0x31, 0x44, 0x50, 0xb4, 0x8f, 0xed, 0x1f, 0x1a, 0xdb, 0x99, 0x8d, 0x33, 0x9f, 0x11, 0x83, 0x14,
};

struct md2 {
    unsigned char x[48], c[16], buf[16];
    unsigned n;
};

static void md2_block(struct md2 *m)
{
    unsigned char l = m->c[15];
    for (int j = 0; j < 16; j++) {
        m->x[16 + j] = m->buf[j];
        m->x[32 + j] = m->x[j] ^ m->buf[j];
        l = m->c[j] ^= md2_s[m->buf[j] ^ l];
    }
    unsigned t = 0;
    for (unsigned j = 0; j < 18; j++) {
        for (int k = 0; k < 48; k++)
            t = m->x[k] ^= md2_s[t];
        t = (t + j) & 0xff;
    }
}

static void md2_update(struct md2 *m, const void *data, size_t len, unsigned char mask)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        m->buf[m->n++] = p[i] ^ mask;
        if (m->n == 16) {
            md2_block(m);
            m->n = 0;
        }
    }
}

static void md2_final(struct md2 *m, unsigned char out[16])
{
    unsigned char pad = (unsigned char)(16 - m->n);
    for (unsigned i = 0; i < pad; i++)
        md2_update(m, &pad, 1, 0);
    unsigned char c[16];
    memcpy(c, m->c, 16);
    md2_update(m, c, 16, 0);
    memcpy(out, m->x, 16);
}

/* The key: the fixed output of a first pass that reads no input. */
static const unsigned char integrity_key[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                                0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};

struct integrity_input {
    unsigned driver_version, version, pid, thread;
    const void *cudart_table, *integrity_table, *fn;
    unsigned long long unix_seconds;
};

struct integrity_device {
    unsigned char uuid[16];
    int pci_domain, pci_bus, pci_device;
};

_Static_assert(sizeof(struct integrity_input) == 48, "integrity input layout");
_Static_assert(sizeof(struct integrity_device) == 28, "integrity device layout");

void sim_integrity_digest(unsigned version, unsigned long long unix_seconds,
                          unsigned driver_version, unsigned pid, unsigned thread,
                          const void *cudart, const void *integrity, const void *fn, int ndev,
                          const unsigned char (*uuids)[16], const int (*pci)[3],
                          unsigned long long out[2])
{
    if (version % 10 == 0 || version % 10 == 1) {
        out[0] = version % 10 ? 0x1841181c03cb675cULL : 0x3341181c03cb675cULL;
        out[1] = 0x8ed383aa1f4cd1e8ULL;
        return;
    }
    struct integrity_input in;
    memset(&in, 0, sizeof in);
    in.driver_version = driver_version;
    in.version = version;
    in.pid = pid;
    in.thread = thread;
    in.cudart_table = cudart;
    in.integrity_table = integrity;
    in.fn = fn;
    in.unix_seconds = unix_seconds;
    struct md2 m;
    memset(&m, 0, sizeof m);
    md2_update(&m, integrity_key, 16, 0x36);
    md2_update(&m, &in, sizeof in, 0);
    for (int d = 0; d < ndev; d++) {
        struct integrity_device dv;
        memset(&dv, 0, sizeof dv);
        memcpy(dv.uuid, uuids[d], 16);
        dv.pci_domain = pci[d][0];
        dv.pci_bus = pci[d][1];
        dv.pci_device = pci[d][2];
        md2_update(&m, &dv, sizeof dv, 0);
    }
    unsigned char inner[16];
    md2_final(&m, inner);
    memset(&m, 0, sizeof m);
    md2_update(&m, integrity_key, 16, 0x5c);
    md2_update(&m, inner, 16, 0);
    unsigned char digest[16];
    md2_final(&m, digest);
    memcpy(out, digest, 16);
}

static CUresult integrity_check(unsigned version, unsigned long long unix_seconds,
                                unsigned long long result[2])
{
    NEED_INIT();
    if (!result)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned char uuids[SIM_MAX_DEVICES][16];
    int pci[SIM_MAX_DEVICES][3];
    for (int d = 0; d < drv.nvis; d++) {
        memcpy(uuids[d], drv.cfg.uuid_bytes[drv.vis[d]], 16);
        if (cuDeviceGetAttribute(&pci[d][0], CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d) ||
            cuDeviceGetAttribute(&pci[d][1], CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d) ||
            cuDeviceGetAttribute(&pci[d][2], CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d))
            return CUDA_ERROR_INVALID_DEVICE;
    }
    sim_integrity_digest(version, unix_seconds, (unsigned)drv.cfg.driver_version,
                         (unsigned)getpid(), (unsigned)(uintptr_t)pthread_self(), cudart_table,
                         integrity_table, integrity_table[1], drv.nvis,
                         (const unsigned char (*)[16])uuids, (const int (*)[3])pci, result);
    if (trace_on())
        fprintf(stderr, "cgpu-sim: integrity check (version %u, time %llu) = %016llx%016llx\n",
                version, unix_seconds, result[0], result[1]);
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* A table cuBLASLt 13 asks for on its first heuristic query: slot 4 fills a  */
/* pointer to a byte per SM (a GPC per SM, as its use suggests) and a second  */
/* value.  cuBLASLt takes a failure, or a NULL array, as "not known" and goes */
/* on without it, but it calls the slot without checking that the table came */
/* back, so the table must exist.  Every slot is a stub.                      */

static const void *const topology_table[9] = {
    (const void *)(9 * sizeof(void *)),
    (const void *)topology_1,
    (const void *)topology_2,
    (const void *)topology_3,
    (const void *)topology_4,
    (const void *)topology_5,
    (const void *)topology_6,
    (const void *)topology_7,
    (const void *)topology_8,
};

/* ------------------------------------------------------------------------ */
/* cuGetExportTable                                                          */

static const struct {
    const char *name;
    unsigned char id[16];
    const void *const *table;
} tables[] = {
    {"cudart_interface",
     {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9},
     cudart_table},
    {"tools_tls",
     {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc},
     tls_table},
    {"tools_runtime_callback_hooks",
     {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66},
     hooks_table},
    {"context_local_storage",
     {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93},
     cls_table},
    {"ctx_create_bypass",
     {0x0c, 0xa5, 0x0b, 0x8c, 0x10, 0x04, 0x92, 0x9a, 0x89, 0xa7, 0xd0, 0xdf, 0x10, 0xe7, 0x72, 0x86},
     bypass_table},
    {"heap_access",
     {0x19, 0x5b, 0xcb, 0xf4, 0xd6, 0x7d, 0x02, 0x4a, 0xac, 0xc5, 0x1d, 0x29, 0xce, 0xa6, 0x31, 0xae},
     heap_table},
    {"device_extended_rt",
     {0xb1, 0x05, 0x41, 0xe1, 0xf7, 0xc7, 0xc7, 0x4a, 0x9f, 0x64, 0xf2, 0x23, 0xbe, 0x99, 0xf1, 0xe2},
     devext_table},
    {"integrity_check",
     {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2},
     integrity_table},
    {"context_checks",
     {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e},
     ctxcheck_table},
    {"runtime_tools_13_5",
     {0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2},
     rttools_table},
    {"sm_topology",
     {0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca},
     topology_table},
};

SIM_API CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    *ppExportTable = NULL;
    CUresult rc = CUDA_ERROR_NOT_SUPPORTED;
    const char *name = "unknown";
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++)
        if (!memcmp(tables[i].id, pExportTableId->bytes, 16)) {
            *ppExportTable = tables[i].table;
            name = tables[i].name;
            rc = CUDA_SUCCESS;
            break;
        }
    if (trace_on()) {
        const unsigned char *b = (const unsigned char *)pExportTableId->bytes;
        fprintf(stderr, "cgpu-sim: cuGetExportTable(");
        for (int i = 0; i < 16; i++)
            fprintf(stderr, "%02x", b[i]);
        fprintf(stderr, ") = %d %s\n", (int)rc, name);
    }
    return rc;
}
