/* The simulated CUDA driver (libcuda.so.1).  Backing store of device memory.
 *
 * Device addresses are real virtual addresses of this process: each zone of
 * the fake address space is a PROT_NONE, MAP_NORESERVE reservation, so no host
 * pointer the program gets can ever equal a device address (as with the real
 * driver's unified address space), and the host faults on a plain device
 * pointer as it does on a real GPU.
 *
 * The bytes live in one memfd per zone, of the zone's size and sparse, mapped
 * once read-write at a private "view": the bytes of device address `va` are at
 * view + (va - zone base).  A page costs memory only once written (or read),
 * and freeing punches the range out of the file.  Managed memory maps the same
 * file pages at the device address itself, so the host reads and writes it.
 * Physical VMM allocations (cuMemCreate) are ranges of one more file; cuMemMap
 * overlays the handle's range on the view, so every mapping of one handle
 * shares its bytes. */
#include "cuda_sim.h"
#include "cgpu_macros.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

struct arena {
    unsigned long long base, size;
    unsigned char *view;
    int fd;
};

/* [0]: legacy 32-bit zone (may be empty), [1]: everything else. */
static struct arena arenas[2] = {{.fd = -1}, {.fd = -1}};

/* Physical memory of VMM handles: ranges of one more sparse file (one file
 * descriptor for all handles: a program may hold thousands of them). */
static int phys_fd = -1;
static struct zone phys_zone;


static void arena_drop(struct arena *a)
{
    if (a->view)
        munmap(a->view, a->size);
    if (a->base)
        munmap((void *)(uintptr_t)a->base, a->size);
    if (a->fd >= 0)
        close(a->fd);
    *a = (struct arena){.fd = -1};
}

/* Reserve `size` bytes of address space aligned to `align` (flags: extra
 * mmap flags, e.g. MAP_32BIT); 0 on failure. */
static unsigned long long reserve(unsigned long long size, unsigned long long align, int flags)
{
    unsigned long long want = size + align;
    void *p = mmap(NULL, want, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | flags, -1,
                   0);
    if (p == MAP_FAILED)
        return 0;
    unsigned long long lo = (uintptr_t)p, at = round_up(lo, align);
    if (at > lo)
        munmap(p, at - lo);
    if (at + size < lo + want)
        munmap((void *)(uintptr_t)(at + size), lo + want - at - size);
    return at;
}

static int arena_make(struct arena *a, unsigned long long size, unsigned long long min,
                      unsigned long long align, int flags)
{
    for (; size >= min; size /= 2) {
        unsigned long long base = reserve(size, align, flags);
        if (!base)
            continue;
        if (flags & MAP_32BIT && base + size > (1ULL << 32)) {
            munmap((void *)(uintptr_t)base, size);
            continue;
        }
        int fd = memfd_create("cgpu-sim-device", MFD_CLOEXEC);
        void *view = MAP_FAILED;
        if (fd >= 0 && !ftruncate(fd, (off_t)size))
            view = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        if (view == MAP_FAILED) { /* e.g. RLIMIT_AS: try a smaller one */
            if (fd >= 0)
                close(fd);
            munmap((void *)(uintptr_t)base, size);
            continue;
        }
        *a = (struct arena){base, size, view, fd};
        return 0;
    }
    return -1;
}

/* A forked child has no driver state: it loses its parent's device memory at
 * once (the files are shared, so writing them would change the parent's). */
static void drop_in_child(void)
{
    for (int i = 0; i < 2; i++)
        arena_drop(&arenas[i]);
    if (phys_fd >= 0)
        close(phys_fd);
    phys_fd = -1;
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void install_atfork(void)
{
    pthread_atfork(NULL, NULL, drop_in_child);
}

int backing_init(void)
{
    pthread_once(&atfork_once, install_atfork);
    for (int i = 0; i < 2; i++)
        arena_drop(&arenas[i]); /* a forked child drops its parent's */
    if (phys_fd >= 0)
        close(phys_fd);
    unsigned long long total = 0;
    for (int i = 0; i < drv.cfg.ndev; i++)
        total += drv.cfg.memory[i];
    /* Room for every device's memory several times over (VMM reservations
     * such as PyTorch's expandable segments take a device's size each). */
    unsigned long long size = total > 512 * GiB ? 2048 * GiB : round_up(4 * total + 64 * GiB, GiB);
    unsigned long long align = drv.cfg.granularity > GiB ? drv.cfg.granularity : GiB;
    if (arena_make(&arenas[1], size, 256 * MiB, align, 0)) {
        fprintf(stderr, "cgpu-sim: cannot reserve address space for device memory\n");
        return -1;
    }
    /* Legacy 32-bit entry points: a small zone below 4 GiB, if the system
     * has one (otherwise they run out of memory). */
    unsigned long long lalign = drv.cfg.granularity > 2 * MiB ? drv.cfg.granularity : 2 * MiB;
    if (arena_make(&arenas[0], 512 * MiB, 32 * MiB, lalign, MAP_32BIT))
        arenas[0] = (struct arena){.fd = -1};
    if (zone_init(&drv.zone[0], arenas[0].base, arenas[0].base + arenas[0].size) ||
        zone_init(&drv.zone[1], arenas[1].base, arenas[1].base + arenas[1].size))
        return -1;
    /* Offset 0 stays unused, so a handle's offset is never 0. */
    phys_fd = memfd_create("cgpu-sim-physical", MFD_CLOEXEC);
    if (phys_fd < 0 || ftruncate(phys_fd, (off_t)(size + GiB)) ||
        zone_init(&phys_zone, GiB, size + GiB))
        return -1;
    return 0;
}

static struct arena *arena_of(unsigned long long va)
{
    for (int i = 0; i < 2; i++)
        if (arenas[i].view && va - arenas[i].base < arenas[i].size)
            return &arenas[i];
    return NULL;
}

int backing_is_device(unsigned long long va)
{
    return arena_of(va) != NULL;
}

void *backing_ptr(unsigned long long va)
{
    struct arena *a = arena_of(va);
    return a ? a->view + (va - a->base) : NULL;
}

int backing_managed(unsigned long long va, unsigned long long size)
{
    struct arena *a = arena_of(va);
    if (!a)
        return -1;
    void *p = mmap((void *)(uintptr_t)va, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, a->fd,
                   (off_t)(va - a->base));
    return p == MAP_FAILED ? -1 : 0;
}

void backing_free(unsigned long long va, unsigned long long size, int managed)
{
    struct arena *a = arena_of(va);
    if (!a)
        return;
    if (managed)
        mmap((void *)(uintptr_t)va, size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    fallocate(a->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(va - a->base),
              (off_t)size);
}

int backing_map(unsigned long long va, unsigned long long size, int fd, unsigned long long off)
{
    struct arena *a = arena_of(va);
    if (!a)
        return -1;
    void *p = mmap(a->view + (va - a->base), size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                   fd, (off_t)off);
    return p == MAP_FAILED ? -1 : 0;
}

void backing_unmap(unsigned long long va, unsigned long long size)
{
    struct arena *a = arena_of(va);
    if (a)
        backing_map(va, size, a->fd, va - a->base);
}

int backing_phys_alloc(unsigned long long size, unsigned long long *off)
{
    return zone_take(&phys_zone, size, drv.cfg.granularity, 0, off);
}

void backing_phys_free(unsigned long long off, unsigned long long size)
{
    fallocate(phys_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)size);
    zone_give(&phys_zone, off, size);
}

int backing_phys_map(unsigned long long va, unsigned long long size, unsigned long long off)
{
    return backing_map(va, size, phys_fd, off);
}

int backing_fd(unsigned long long va, unsigned long long *off)
{
    struct arena *a = arena_of(va);
    if (!a)
        return -1;
    *off = va - a->base;
    return a->fd;
}

/* Move a handle's bytes out of the physical file into a file of its own (to
 * share it as a file descriptor): a new file of `size` bytes plus one page
 * for `tail_len` bytes of `tail`.  The caller remaps and frees the old range.
 * The new descriptor, or -1. */
int backing_phys_own(unsigned long long off, unsigned long long size, const void *tail,
                     size_t tail_len)
{
    int fd = memfd_create("cgpu-sim-vmm", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    if (ftruncate(fd, (off_t)(size + 4096)) || tail_len > 4096 ||
        pwrite(fd, tail, tail_len, (off_t)size) != (ssize_t)tail_len) {
        close(fd);
        return -1;
    }
    /* Copy only the data the range holds (holes stay holes). */
    enum { CHUNK = 1 << 20 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf) {
        close(fd);
        return -1;
    }
    unsigned long long pos = 0;
    while (pos < size) {
        off_t data = lseek(phys_fd, (off_t)(off + pos), SEEK_DATA);
        if (data < 0 || (unsigned long long)data >= off + size)
            break;
        off_t hole = lseek(phys_fd, data, SEEK_HOLE);
        unsigned long long end = hole < 0 || (unsigned long long)hole > off + size
                                     ? off + size : (unsigned long long)hole;
        for (unsigned long long from = (unsigned long long)data; from < end;) {
            size_t len = end - from < CHUNK ? (size_t)(end - from) : CHUNK;
            ssize_t n = pread(phys_fd, buf, len, (off_t)from);
            if (n <= 0 || pwrite(fd, buf, (size_t)n, (off_t)(from - off)) != n) {
                free(buf);
                close(fd);
                return -1;
            }
            from += (unsigned long long)n;
        }
        pos = end - off;
    }
    free(buf);
    return fd;
}
