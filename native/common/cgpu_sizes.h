/* The device memory the driver takes for what a program asks of it beyond plain bytes: CUDA
 * arrays, pitched allocations, graph allocation nodes and the per-context heaps.  The shim
 * charges these sizes and the simulator allocates them, so they are computed here only
 * (cgpu_sizes.c).  Pages are the allocation granularity: 2 MiB on NVIDIA's GPUs, which the
 * shim assumes, and CGPU_SIM_GRANULARITY in the simulator. */
#ifndef CGPU_SIZES_H
#define CGPU_SIZES_H

#include <cuda.h>
#include <stdint.h>

#define CGPU_PITCH_ALIGN 512ULL        /* the row pitch of cuMemAllocPitch */
#define CGPU_STACK_DEFAULT 1024ULL     /* CU_LIMIT_STACK_SIZE of a new context, per thread */
#define CGPU_MALLOC_HEAP_DEFAULT (8ULL << 20)
#define CGPU_PRINTF_FIFO_DEFAULT (1ULL << 20)

/* `bytes` in whole pages of `page` bytes. */
uint64_t cgpu_pages(uint64_t bytes, uint64_t page);

/* The row pitch of a pitched allocation `width` bytes wide (it wraps past 2^64 - 512: callers
 * compare it with `width`). */
uint64_t cgpu_pitch(uint64_t width);

/* Bytes of one `w` x `h` x `d` level of an array of format `f` with `channels` channels: the
 * elements' bytes, or for a block-compressed format its 4x4 blocks'.  0 for a descriptor the
 * driver refuses (a channel count other than 1, 2 or 4 where the format has channels, a side
 * past 2^20).  A format this table does not know counts 16 bytes an element and channel (over,
 * never under) and sets *known to 0 (else 1). */
uint64_t cgpu_array_level_bytes(CUarray_format f, unsigned channels, uint64_t w, uint64_t h, uint64_t d,
                                int *known);

/* Bytes of an array (`levels` 0 or 1) or mipmapped array: each level halves width, height and
 * depth, down to 1, but not the layers of a layered or cubemap array (its depth); the levels
 * stop at the first that is 1 x 1 x 1.  0 and *known as cgpu_array_level_bytes. */
uint64_t cgpu_array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned levels, int *known);

/* The device memory a per-context heap (CU_LIMIT_STACK_SIZE, CU_LIMIT_MALLOC_HEAP_SIZE,
 * CU_LIMIT_PRINTF_FIFO_SIZE) of size `value` takes, in pages: the stack is reserved for each
 * of the device's `resident` threads (SMs times the threads an SM holds), its per-thread size
 * rounded to 16 bytes (1 KiB is 264 MiB on an H100); the malloc heap and the printf FIFO take
 * their size.  0 for any other limit. */
uint64_t cgpu_heap_bytes(CUlimit limit, uint64_t value, uint64_t resident, uint64_t page);

/* What that heap takes beyond its default size (which is part of a context's overhead). */
uint64_t cgpu_heap_beyond_default(CUlimit limit, uint64_t value, uint64_t resident, uint64_t page);

#endif
