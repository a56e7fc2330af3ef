/* The simulated CUDA driver (libcuda.so.1).  Transfers: what a copy or a set
 * is, for cuda_transfer.c (which runs them, in stream order) and the files of
 * entry points that describe them (cuda_copy.c, cuda_memset.c). */
#ifndef CGPU_SIM_CUDA_TRANSFER_H
#define CGPU_SIM_CUDA_TRANSFER_H

#include "cuda_sim.h"

enum { S_HOST = 1, S_DEV, S_ARRAY, S_ANY };

struct side {
    int type;
    unsigned long long addr;       /* host pointer, device address, or byte offset in the array */
    struct sim_array *arr;
    unsigned long long pitch, height; /* bytes per row; rows per slice */
    unsigned long long rid;        /* S_DEV: the region's id when checked */
};

struct xfer {
    struct side dst, src;
    unsigned long long w, h, d;    /* bytes per row, rows, slices */
    int set;                       /* a fill: esize-byte elements of val */
    unsigned esize, val;
    unsigned char *stage;          /* pageable source, staged */
};

/* How a transfer is issued.  T_SYNC: a synchronous copy, which waits for the
 * context's queued work and is done when it returns.  T_ASYNC: on a stream.
 * T_SET_SYNC: a synchronous set, on the legacy stream (asynchronous for
 * device memory, as the driver documents). */
enum { T_SYNC, T_ASYNC, T_SET_SYNC };

/* Bytes of an array's level 0 and its rows per slice (0: not an array). */
static inline unsigned long long array_row(const struct sim_array *a, unsigned long long *rows,
                                           unsigned long long *slices)
{
    *rows = a->desc.Height ? a->desc.Height : 1;
    *slices = a->desc.Depth ? a->desc.Depth : 1;
    return a->row_bytes;
}

/* Check, then run or queue a transfer. */
CUresult xfer_issue(struct xfer *x, CUstream stream, int mode);

#endif
