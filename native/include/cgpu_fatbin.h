/* Fat binaries, read alike by the shim (to charge a module's globals before the driver loads
 * it) and the simulator (to allocate them as the driver does).
 *
 * A fatbin is a header, then entries, each a header and a payload: PTX (kind 1) or a cubin
 * (kind 2, an ELF image) for one architecture.  The driver loads the cubin for the device: of
 * those of its major version, the newest no newer than the device (sm_80 and sm_86 cubins on
 * an sm_86 GPU: sm_86; on an sm_89 one: sm_86); without one it compiles the PTX of the newest
 * architecture no newer than the device (cgpu_ptx.h reads its globals).  A payload
 * may be compressed: flag 0x2000 is an LZ4 block (nvcc --compress-mode=speed, and CUDA 11 and
 * 12's compressed fatbins), decoded here; flag 0x8000 a zstd frame (--compress-mode=size,
 * CUDA 13's libraries), decoded by the system's libzstd.so.1, loaded at the first one.
 * A fatbin wrapper (__fatBinC_Wrapper_t: what libcudart registers and hands to
 * cuLibraryLoadData) points at its fatbin.
 *
 * Entry header (64 bytes, 80 for PTX and from sm_100; offsets in bytes): kind u16 @0, header size u32
 * @4, payload size u32 @8 (8-byte aligned, padded), architecture u32 @28 (major * 10 + minor),
 * flags u64 @40, uncompressed size u64 @56.  Layout as nvcc 13.0
 * writes it (tests/shim/data) and as cuobjdump reads it.
 *
 * Off every hot path: loads only. */
#ifndef CGPU_FATBIN_H
#define CGPU_FATBIN_H

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CGPU_FATBIN_MAGIC 0xBA55ED50u
#define CGPU_FATBIN_WRAPPER_MAGIC 0x466243B1u
#define CGPU_FATBIN_LZ4 0x2000u
#define CGPU_FATBIN_ZSTD 0x8000u
#define CGPU_CUBIN_MAX (1ULL << 30) /* a larger cubin is taken as malformed */

enum cgpu_fatbin_pick {
    CGPU_FATBIN_NOT = 0,    /* not a fatbin */
    CGPU_FATBIN_CUBIN,      /* the cubin the driver loads */
    CGPU_FATBIN_PTX,        /* no cubin for this device: the PTX the driver compiles */
    CGPU_FATBIN_NONE,       /* neither: the driver cannot load it on this device */
    CGPU_FATBIN_UNREADABLE, /* compressed, and it could not be decoded */
};

struct cgpu_fatbin_wrapper { /* __fatBinC_Wrapper_t */
    int magic;
    int version;
    const void *data;
    void *filename_or_fatbins;
};

static inline uint32_t cgpu_fb_u32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint64_t cgpu_fb_u64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The fatbin a wrapper at `img` points to, or `img` itself.  Byte by byte, stopping at the
 * first that differs: a short text image (PTX) ends there. */
static inline const unsigned char *cgpu_fatbin_unwrap(const unsigned char *img)
{
    if (!img || img[0] != 0xb1 || img[1] != 0x43 || img[2] != 0x62 || img[3] != 0x46)
        return img;
    const struct cgpu_fatbin_wrapper *w = (const struct cgpu_fatbin_wrapper *)(const void *)img;
    return w->version == 1 || w->version == 2 ? (const unsigned char *)w->data : NULL;
}

/* The length of the fatbin at `img` from its header, or 0 if it is none. */
static inline size_t cgpu_fatbin_length(const unsigned char *img)
{
    if (!img || img[0] != 0x50 || img[1] != 0xed || img[2] != 0x55 || img[3] != 0xba)
        return 0;
    uint16_t header;
    memcpy(&header, img + 6, sizeof header);
    uint64_t size = cgpu_fb_u64(img + 8);
    return header >= 16 && size < CGPU_CUBIN_MAX * 4 ? (size_t)header + (size_t)size : 0;
}

/* An LZ4 length of 15 goes on in the bytes after it, each added, until one is not 255:
 * `*len` grows by them and `*i` passes them; -1 if the input ends first. */
static inline int cgpu_lz4_length(const unsigned char *src, size_t n, size_t *i, size_t *len)
{
    if (*len != 15)
        return 0;
    unsigned char b;
    do {
        if (*i >= n)
            return -1;
        b = src[(*i)++];
        *len += b;
    } while (b == 255);
    return 0;
}

/* An LZ4 block (`n` bytes at `src`, padding after it allowed) decoded into exactly `cap` bytes
 * at `dst`: 0, or -1 if it is malformed or decodes to another length. */
static inline int cgpu_lz4_block(const unsigned char *src, size_t n, unsigned char *dst, size_t cap)
{
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned token = src[i++];
        size_t lit = token >> 4, match = token & 15u;
        if (cgpu_lz4_length(src, n, &i, &lit) || lit > n - i || lit > cap - o)
            return -1;
        memcpy(dst + o, src + i, lit);
        i += lit;
        o += lit;
        if (o == cap) /* the last sequence is literals only */
            return 0;
        if (n - i < 2)
            return -1;
        size_t off = (size_t)src[i] | (size_t)src[i + 1] << 8;
        i += 2;
        if (off == 0 || off > o || cgpu_lz4_length(src, n, &i, &match))
            return -1;
        match += 4;
        if (match > cap - o)
            return -1;
        for (size_t k = 0; k < match; k++, o++) /* may overlap what it copies */
            dst[o] = dst[o - off];
    }
    return o == cap ? 0 : -1;
}

/* libzstd's entry points, found at the first zstd entry (each library that includes this has
 * its own). */
static struct {
    pthread_once_t once;
    size_t (*decompress)(void *dst, size_t cap, const void *src, size_t len);
    size_t (*frame_size)(const void *src, size_t len);
    unsigned (*is_error)(size_t code);
} cgpu_zstd __attribute__((unused)) = {.once = PTHREAD_ONCE_INIT};

static inline void cgpu_zstd_load(void)
{
    void *h = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
    cgpu_zstd.is_error = (unsigned (*)(size_t))dlsym(h, "ZSTD_isError");
    cgpu_zstd.frame_size = (size_t (*)(const void *, size_t))dlsym(h, "ZSTD_findFrameCompressedSize");
    cgpu_zstd.decompress = (size_t (*)(void *, size_t, const void *, size_t))dlsym(h, "ZSTD_decompress");
    if (!cgpu_zstd.is_error || !cgpu_zstd.frame_size)
        cgpu_zstd.decompress = NULL;
}

/* A zstd frame (at most `n` bytes at `src`, padding after it allowed) decoded into exactly
 * `cap` bytes: 0, or -1 (malformed, another length, or no libzstd.so.1). */
static inline int cgpu_zstd_frame(const unsigned char *src, size_t n, unsigned char *dst, size_t cap)
{
    pthread_once(&cgpu_zstd.once, cgpu_zstd_load);
    if (!cgpu_zstd.decompress)
        return -1;
    size_t frame = cgpu_zstd.frame_size(src, n);
    if (cgpu_zstd.is_error(frame))
        return -1;
    size_t got = cgpu_zstd.decompress(dst, cap, src, frame);
    return cgpu_zstd.is_error(got) || got != cap ? -1 : 0;
}

/* What the driver loads from fatbin `img` (`len` bytes) on a device of architecture `arch`
 * (major * 10 + minor): the cubin of the device's major version no newer than it, the newest
 * such; without one, the PTX of the newest architecture no newer than the device, which it
 * compiles.  Its bytes in *image and *image_len (PTX: the text, up to its first NUL), and in
 * *owned a buffer the caller frees (the decoded payload; NULL when the image lies in `img`). */
static inline enum cgpu_fatbin_pick cgpu_fatbin_load(const unsigned char *img, size_t len, unsigned arch,
                                                     const unsigned char **image, size_t *image_len,
                                                     unsigned char **owned)
{
    *owned = NULL;
    *image = NULL;
    *image_len = 0;
    size_t total = cgpu_fatbin_length(img);
    if (!total || total > len || cgpu_fb_u32(img) != CGPU_FATBIN_MAGIC)
        return CGPU_FATBIN_NOT;
    uint16_t header;
    memcpy(&header, img + 6, sizeof header);
    const unsigned char *cubin = NULL, *ptx = NULL;
    unsigned cubin_arch = 0, ptx_arch = 0;
    for (size_t at = header; at + 64 <= total;) {
        const unsigned char *e = img + at;
        uint32_t head = cgpu_fb_u32(e + 4), payload = cgpu_fb_u32(e + 8);
        if (head < 64 || head > total - at || payload > total - at - head)
            break;
        unsigned kind = (unsigned)e[0] | (unsigned)e[1] << 8, a = cgpu_fb_u32(e + 28);
        if (kind == 2 && a <= arch && a / 10 == arch / 10 && (!cubin || a >= cubin_arch)) {
            cubin = e;
            cubin_arch = a;
        } else if (kind == 1 && a <= arch && (!ptx || a >= ptx_arch)) {
            ptx = e;
            ptx_arch = a;
        }
        at += head + payload;
    }
    const unsigned char *best = cubin ? cubin : ptx;
    if (!best)
        return CGPU_FATBIN_NONE;
    const enum cgpu_fatbin_pick kind = cubin ? CGPU_FATBIN_CUBIN : CGPU_FATBIN_PTX;
    const unsigned char *data = best + cgpu_fb_u32(best + 4);
    uint32_t payload = cgpu_fb_u32(best + 8);
    uint64_t flags = cgpu_fb_u64(best + 40), size = cgpu_fb_u64(best + 56);
    if (!(flags & (CGPU_FATBIN_LZ4 | CGPU_FATBIN_ZSTD))) {
        *image = data;
        *image_len = kind == CGPU_FATBIN_PTX ? strnlen((const char *)data, payload) : payload;
        return kind;
    }
    if (!size || size > CGPU_CUBIN_MAX)
        return CGPU_FATBIN_UNREADABLE;
    unsigned char *out = malloc((size_t)size);
    if (!out)
        return CGPU_FATBIN_UNREADABLE;
    int bad = flags & CGPU_FATBIN_ZSTD ? cgpu_zstd_frame(data, payload, out, (size_t)size)
                                       : cgpu_lz4_block(data, payload, out, (size_t)size);
    if (bad) {
        free(out);
        return CGPU_FATBIN_UNREADABLE;
    }
    *image = *owned = out;
    *image_len = kind == CGPU_FATBIN_PTX ? strnlen((const char *)out, (size_t)size) : (size_t)size;
    return kind;
}

#endif
