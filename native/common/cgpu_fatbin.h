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
 * Off every hot path: loads only.  The reader is cgpu_fatbin.c. */
#ifndef CGPU_FATBIN_H
#define CGPU_FATBIN_H

#include <stddef.h>
#include <stdint.h>

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

/* The fatbin a wrapper at `img` points to, or `img` itself (NULL: a wrapper of a version this
 * reader does not know).  Byte by byte, stopping at the first that differs: a short text image
 * (PTX) ends there. */
const unsigned char *cgpu_fatbin_unwrap(const unsigned char *img);

/* The length of the fatbin at `img` from its header, or 0 if it is none. */
size_t cgpu_fatbin_length(const unsigned char *img);

/* What the driver loads from fatbin `img` (`len` bytes) on a device of architecture `arch`
 * (major * 10 + minor): the cubin of the device's major version no newer than it, the newest
 * such; without one, the PTX of the newest architecture no newer than the device, which it
 * compiles.  Its bytes in *image and *image_len (PTX: the text, up to its first NUL), and in
 * *owned a buffer the caller frees (the decoded payload; NULL when the image lies in `img`). */
enum cgpu_fatbin_pick cgpu_fatbin_load(const unsigned char *img, size_t len, unsigned arch,
                                       const unsigned char **image, size_t *image_len, unsigned char **owned);

#endif
