/* Fat binaries: the reader the shim and the simulator share (cgpu_fatbin.h says what a fatbin
 * is and what the driver loads from it). */
#include "cgpu_fatbin.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static uint32_t fb_u32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t fb_u64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

const unsigned char *cgpu_fatbin_unwrap(const unsigned char *img)
{
    if (!img || img[0] != 0xb1 || img[1] != 0x43 || img[2] != 0x62 || img[3] != 0x46)
        return img;
    const struct cgpu_fatbin_wrapper *w = (const struct cgpu_fatbin_wrapper *)(const void *)img;
    return w->version == 1 || w->version == 2 ? (const unsigned char *)w->data : NULL;
}

size_t cgpu_fatbin_length(const unsigned char *img)
{
    if (!img || img[0] != 0x50 || img[1] != 0xed || img[2] != 0x55 || img[3] != 0xba)
        return 0;
    uint16_t header;
    memcpy(&header, img + 6, sizeof header);
    uint64_t size = fb_u64(img + 8);
    return header >= 16 && size < CGPU_CUBIN_MAX * 4 ? (size_t)header + (size_t)size : 0;
}

/* An LZ4 length of 15 goes on in the bytes after it, each added, until one is not 255:
 * `*len` grows by them and `*i` passes them; -1 if the input ends first. */
static int lz4_length(const unsigned char *src, size_t n, size_t *i, size_t *len)
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
static int lz4_block(const unsigned char *src, size_t n, unsigned char *dst, size_t cap)
{
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned token = src[i++];
        size_t lit = token >> 4, match = token & 15u;
        if (lz4_length(src, n, &i, &lit) || lit > n - i || lit > cap - o)
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
        if (off == 0 || off > o || lz4_length(src, n, &i, &match))
            return -1;
        match += 4;
        if (match > cap - o)
            return -1;
        for (size_t k = 0; k < match; k++, o++) /* may overlap what it copies */
            dst[o] = dst[o - off];
    }
    return o == cap ? 0 : -1;
}

/* libzstd's entry points, found at the first zstd entry (one set per library that links this). */
static struct {
    pthread_once_t once;
    size_t (*decompress)(void *dst, size_t cap, const void *src, size_t len);
    size_t (*frame_size)(const void *src, size_t len);
    unsigned (*is_error)(size_t code);
} zstd = {.once = PTHREAD_ONCE_INIT};

static void zstd_load(void)
{
    void *h = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
    zstd.is_error = (unsigned (*)(size_t))dlsym(h, "ZSTD_isError");
    zstd.frame_size = (size_t (*)(const void *, size_t))dlsym(h, "ZSTD_findFrameCompressedSize");
    zstd.decompress = (size_t (*)(void *, size_t, const void *, size_t))dlsym(h, "ZSTD_decompress");
    if (!zstd.is_error || !zstd.frame_size)
        zstd.decompress = NULL;
}

/* A zstd frame (at most `n` bytes at `src`, padding after it allowed) decoded into exactly
 * `cap` bytes: 0, or -1 (malformed, another length, or no libzstd.so.1). */
static int zstd_frame(const unsigned char *src, size_t n, unsigned char *dst, size_t cap)
{
    pthread_once(&zstd.once, zstd_load);
    if (!zstd.decompress)
        return -1;
    size_t frame = zstd.frame_size(src, n);
    if (zstd.is_error(frame))
        return -1;
    size_t got = zstd.decompress(dst, cap, src, frame);
    return zstd.is_error(got) || got != cap ? -1 : 0;
}

enum cgpu_fatbin_pick cgpu_fatbin_load(const unsigned char *img, size_t len, unsigned arch,
                                       const unsigned char **image, size_t *image_len, unsigned char **owned)
{
    *owned = NULL;
    *image = NULL;
    *image_len = 0;
    size_t total = cgpu_fatbin_length(img);
    if (!total || total > len || fb_u32(img) != CGPU_FATBIN_MAGIC)
        return CGPU_FATBIN_NOT;
    uint16_t header;
    memcpy(&header, img + 6, sizeof header);
    const unsigned char *cubin = NULL, *ptx = NULL;
    unsigned cubin_arch = 0, ptx_arch = 0;
    for (size_t at = header; at + 64 <= total;) {
        const unsigned char *e = img + at;
        uint32_t head = fb_u32(e + 4), payload = fb_u32(e + 8);
        if (head < 64 || head > total - at || payload > total - at - head)
            break;
        unsigned kind = (unsigned)e[0] | (unsigned)e[1] << 8, a = fb_u32(e + 28);
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
    const unsigned char *data = best + fb_u32(best + 4);
    uint32_t payload = fb_u32(best + 8);
    uint64_t flags = fb_u64(best + 40), size = fb_u64(best + 56);
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
    int bad = flags & CGPU_FATBIN_ZSTD ? zstd_frame(data, payload, out, (size_t)size)
                                       : lz4_block(data, payload, out, (size_t)size);
    if (bad) {
        free(out);
        return CGPU_FATBIN_UNREADABLE;
    }
    *image = *owned = out;
    *image_len = kind == CGPU_FATBIN_PTX ? strnlen((const char *)out, (size_t)size) : (size_t)size;
    return kind;
}
