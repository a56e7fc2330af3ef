/* The images a module or library is loaded from, and the device memory their globals take: what
 * the shim charges at a load and the simulator allocates, computed here only (cgpu_image.c).
 *
 * An image is a cubin (an ELF image: what nvcc -cubin, a JIT or Triton writes), PTX text (which
 * the driver compiles with ptxas: cgpu_ptx.h), or a fatbin or a fatbin wrapper (from which the
 * driver loads one cubin or PTX entry for the device: cgpu_fatbin.h).  A cubin declares its
 * globals in sections: .nv.global (zero-filled), .nv.global.init (initialised) and the user
 * constant banks .nv.constant1..9 (not a kernel's parameter bank, .nv.constant0.<kernel>).  The
 * driver allocates them together when it loads the module, each section aligned.
 *
 * Off every hot path: loads only. */
#ifndef CGPU_IMAGE_H
#define CGPU_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#define CGPU_IMAGE_MAX (1ULL << 30) /* PTX text in memory is read up to its NUL, at most this far */
#define CGPU_SECTION_MAX (1ULL << 40) /* a larger globals section is not counted */

enum cgpu_image_kind {
    CGPU_IMAGE_CUBIN = 0, /* a cubin, or an image of no kind this reader knows (no globals) */
    CGPU_IMAGE_PTX,       /* PTX text, which the driver compiles */
    CGPU_IMAGE_NOTHING,   /* a fatbin with nothing for the device, or whose entry cannot be decoded */
    CGPU_IMAGE_INVALID,   /* a fatbin wrapper of a version this reader does not know */
};

/* What the driver loads: `len` bytes at `data`; `owned`, a buffer the caller frees (NULL when
 * `data` lies in the image it was handed). */
struct cgpu_image {
    const unsigned char *data;
    size_t len;
    unsigned char *owned;
};

/* Whether `image` (`len` bytes; 0: an image in memory, of unknown length) is a fatbin or a
 * fatbin wrapper: what the driver loads from it depends on the device's architecture. */
int cgpu_image_is_fatbin(const void *image, size_t len);

/* What the driver loads from `image` (`len` bytes; 0: an image in memory, whose length its
 * headers give, or for PTX text its terminating NUL) on a device of architecture `arch`
 * (major * 10 + minor; 0: unknown, when a fatbin gives nothing), into *out. */
enum cgpu_image_kind cgpu_image_load(const void *image, size_t len, unsigned arch, struct cgpu_image *out);

/* The bytes of an ELF image given by address, from its headers; 0 if it is not a 64-bit ELF. */
size_t cgpu_elf_length(const unsigned char *img);

/* The globals of cubin `img` (`len` bytes): their total in *total, each section aligned, and
 * where each section starts among them in at[i] (for i < cap; ~0 for a section of no globals).
 * A section counts when its name is one above, its size is not 0 nor above CGPU_SECTION_MAX;
 * its alignment is its own when that is a power of two up to 4096, else 1 (over, never under).
 * Returns 0 (total 0 for an image that is not a 64-bit ELF), or -1 for a malformed one. */
int cgpu_cubin_globals(const unsigned char *img, size_t len, uint64_t *total, uint64_t *at, size_t cap);

/* The total of the globals of what the driver loaded (cgpu_image_load's *out and kind). */
uint64_t cgpu_image_globals(const struct cgpu_image *image, enum cgpu_image_kind kind);

#endif
