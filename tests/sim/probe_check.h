/* The simulator probes' checks: a failed one prints the file, line and expression (and CUDA's
 * status) on stderr and exits 1.  Shared by sim_probe.c, sim_surface.c, sim_timeline.c and the
 * sim_bytes probe. */
#ifndef CGPU_PROBE_CHECK_H
#define CGPU_PROBE_CHECK_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(expr) do { if (!(expr)) { \
    fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #expr); exit(1); } } while (0)
#define OK(call) do { CUresult rc_ = (call); if (rc_ != CUDA_SUCCESS) { \
    fprintf(stderr, "FAIL %s:%d: %s -> %d\n", __FILE__, __LINE__, #call, (int)rc_); \
    exit(1); } } while (0)
#define RC(call, want) do { CUresult rc_ = (call); if (rc_ != (want)) { \
    fprintf(stderr, "FAIL %s:%d: %s -> %d, want %d\n", __FILE__, __LINE__, #call, (int)rc_, \
            (int)(want)); exit(1); } } while (0)

#endif
