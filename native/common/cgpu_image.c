/* Images and their globals, for the shim and the simulator alike (cgpu_image.h). */
#include "cgpu_image.h"

#include "cgpu_fatbin.h"
#include "cgpu_ptx.h"

#include <elf.h>
#include <string.h>

int cgpu_image_is_fatbin(const void *image, size_t len)
{
    const unsigned char *img = len ? image : cgpu_fatbin_unwrap(image);
    return img && cgpu_fatbin_length(img) != 0;
}

enum cgpu_image_kind cgpu_image_load(const void *image, size_t len, unsigned arch, struct cgpu_image *out)
{
    const unsigned char *img = image;
    out->data = NULL;
    out->len = 0;
    out->owned = NULL;
    if (!img)
        return CGPU_IMAGE_NOTHING;
    if (!len) {
        if (!(img = cgpu_fatbin_unwrap(img)))
            return CGPU_IMAGE_INVALID;
        size_t fat = cgpu_fatbin_length(img);
        len = fat                        ? fat
              : cgpu_ptx_may_be_text(img) ? strnlen((const char *)img, CGPU_IMAGE_MAX) + 1
                                          : cgpu_elf_length(img);
    }
    switch (cgpu_fatbin_load(img, len, arch, &out->data, &out->len, &out->owned)) {
    case CGPU_FATBIN_CUBIN:
        return CGPU_IMAGE_CUBIN;
    case CGPU_FATBIN_PTX:
        return CGPU_IMAGE_PTX;
    case CGPU_FATBIN_NONE:
    case CGPU_FATBIN_UNREADABLE:
        return CGPU_IMAGE_NOTHING;
    case CGPU_FATBIN_NOT:
        break;
    }
    out->data = img;
    if (cgpu_ptx_may_be_text(img)) {
        out->len = strnlen((const char *)img, len);
        return CGPU_IMAGE_PTX;
    }
    out->len = len;
    return CGPU_IMAGE_CUBIN;
}

static int is_elf64(const unsigned char *img)
{
    /* Byte by byte, stopping at the first that differs: a short text ends there. */
    return img[0] == ELFMAG0 && img[1] == ELFMAG1 && img[2] == ELFMAG2 && img[3] == ELFMAG3 &&
           img[EI_CLASS] == ELFCLASS64;
}

size_t cgpu_elf_length(const unsigned char *img)
{
    if (!img || !is_elf64(img))
        return 0;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)(const void *)img;
    if (eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > (1ULL << 32) || eh->e_shnum == 0)
        return sizeof *eh;
    size_t len = eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr);
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(const void *)(img + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum; i++)
        if (sh[i].sh_type != SHT_NOBITS && sh[i].sh_offset + sh[i].sh_size > len &&
            sh[i].sh_offset + sh[i].sh_size < (1ULL << 32))
            len = sh[i].sh_offset + sh[i].sh_size;
    return len;
}

/* Whether a section named `name` holds globals. */
static int globals_section(const char *name)
{
    if (!strncmp(name, ".nv.global", 10))
        return name[10] == 0 || name[10] == '.';
    return !strncmp(name, ".nv.constant", 12) && name[12] >= '1' && name[12] <= '9';
}

int cgpu_cubin_globals(const unsigned char *img, size_t len, uint64_t *total, uint64_t *at, size_t cap)
{
    *total = 0;
    for (size_t i = 0; i < cap; i++)
        at[i] = ~0ULL;
    if (!img || len < sizeof(Elf64_Ehdr) || !is_elf64(img))
        return 0;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)(const void *)img;
    if (eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > len ||
        (len - eh->e_shoff) / sizeof(Elf64_Shdr) < eh->e_shnum || eh->e_shstrndx >= eh->e_shnum)
        return eh->e_shnum ? -1 : 0;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(const void *)(img + eh->e_shoff);
    const Elf64_Shdr *names = &sh[eh->e_shstrndx];
    if (names->sh_offset > len || names->sh_size > len - names->sh_offset)
        return -1;
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_name >= names->sh_size || !sh[i].sh_size || sh[i].sh_size > CGPU_SECTION_MAX)
            continue;
        const char *nm = (const char *)img + names->sh_offset + sh[i].sh_name;
        if (!memchr(nm, 0, names->sh_size - sh[i].sh_name) || !globals_section(nm))
            continue;
        uint64_t align = sh[i].sh_addralign;
        if (align < 1 || align > 4096 || (align & (align - 1)))
            align = 1;
        uint64_t start = (*total + align - 1) & ~(align - 1);
        if (i < cap)
            at[i] = start;
        *total = start + sh[i].sh_size;
    }
    return 0;
}

uint64_t cgpu_image_globals(const struct cgpu_image *image, enum cgpu_image_kind kind)
{
    uint64_t total = 0;
    if (kind == CGPU_IMAGE_PTX)
        return cgpu_ptx_globals((const char *)image->data, image->len);
    if (kind == CGPU_IMAGE_CUBIN && cgpu_cubin_globals(image->data, image->len, &total, NULL, 0) != 0)
        return 0;
    return kind == CGPU_IMAGE_CUBIN ? total : 0;
}
