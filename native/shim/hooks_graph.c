/* Graph memory: what the memory nodes of executable graphs take (cuGraphAddMemAllocNode,
 * or a cuMemAllocAsync captured into a graph).
 *
 * The driver maps a graph's allocations from its per-device graph memory pool when the
 * executable graph is first launched or uploaded, and the pool keeps that memory,
 * reserved, after the executable graph is destroyed, until cuDeviceGraphMemTrim.  The
 * shim charges an executable graph's footprint (the sum of its allocation nodes, each in
 * whole 2 MiB pages: what the driver may need) at instantiation, before the driver call,
 * so that a graph that cannot fit in the slice is refused there with
 * CUDA_ERROR_OUT_OF_MEMORY.  Per device the charge is the larger of what live
 * executable graphs may need and what the driver says the pool reserves
 * (cuDeviceGetGraphMemAttribute, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), re-read after
 * every destruction and trim: memory the pool still keeps stays charged, memory it gave
 * back is credited.  None of this is on the allocation hot path. */
#include "charge.h"

#include "cgpu_sizes.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t graph_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t live[CGPU_MAX_DEVICES];    /* footprints of live executable graphs */
static uint64_t charged[CGPU_MAX_DEVICES]; /* what the ledger holds for graph memory */
static int ordinal_of[CGPU_MAX_DEVICES];   /* a CUDA ordinal of each ledger device, + 1 */

/* A forked child holds none of its parent's graphs (hooks_info.c resets the rest). */
static void graph_forget_process(void)
{
    pthread_mutex_init(&graph_mu, NULL);
    memset(live, 0, sizeof live);
    memset(charged, 0, sizeof charged);
    memset(ordinal_of, 0, sizeof ordinal_of);
}

__attribute__((constructor)) static void graph_at_fork(void)
{
    pthread_atfork(NULL, NULL, graph_forget_process);
}

/* The footprint of `graph`'s allocation nodes, on the device of the first (*dev, -1 when
 * it has none or the device has no slice), with its CUDA ordinal. */
static uint64_t graph_footprint(CUgraph graph, int *dev, int *ordinal)
{
    CUresult (*nodes_fn)(CUgraph, CUgraphNode *, size_t *) =
        (CUresult(*)(CUgraph, CUgraphNode *, size_t *))shim_driver_sym("cuGraphGetNodes");
    CUresult (*type_fn)(CUgraphNode, CUgraphNodeType *) =
        (CUresult(*)(CUgraphNode, CUgraphNodeType *))shim_driver_sym("cuGraphNodeGetType");
    CUresult (*params_fn)(CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS *) =
        (CUresult(*)(CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS *))shim_driver_sym("cuGraphMemAllocNodeGetParams");
    *dev = -1;
    size_t n = 0;
    if (!nodes_fn || !type_fn || !params_fn || nodes_fn(graph, NULL, &n) != CUDA_SUCCESS || !n)
        return 0;
    CUgraphNode *nodes = calloc(n, sizeof *nodes);
    if (!nodes || nodes_fn(graph, nodes, &n) != CUDA_SUCCESS) {
        free(nodes);
        return 0;
    }
    uint64_t foot = 0;
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType type;
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        if (!nodes[i] || type_fn(nodes[i], &type) != CUDA_SUCCESS || type != CU_GRAPH_NODE_TYPE_MEM_ALLOC ||
            params_fn(nodes[i], &p) != CUDA_SUCCESS)
            continue;
        if (*dev < 0) {
            *ordinal = p.poolProps.location.id;
            *dev = device_of_ordinal(*ordinal);
        }
        foot += cgpu_pages(p.bytesize, 2 * MiB); /* each node in pages, as the simulator (cgpu_sizes.h) */
    }
    free(nodes);
    return *dev >= 0 ? foot : 0;
}

/* What the driver's graph memory pool of `dev` reserves now; 0 when it cannot say. */
static uint64_t pool_reserved(int dev)
{
    CUresult (*attr)(CUdevice, CUgraphMem_attribute, void *) =
        (CUresult(*)(CUdevice, CUgraphMem_attribute, void *))shim_driver_sym("cuDeviceGetGraphMemAttribute");
    cuuint64_t reserved = 0;
    int ordinal = ordinal_of[dev] - 1;
    if (ordinal < 0 || !attr || attr(ordinal, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &reserved) != CUDA_SUCCESS)
        return 0;
    return reserved;
}

/* Bring the charge of `dev` to max(live, reserved), adding `extra` to live first.
 * With `refuse`, a rise that does not fit is refused (returns OUT_OF_MEMORY, nothing
 * changed); without, it is forced (the driver holds the memory already).  graph_mu held. */
static CUresult settle(int dev, uint64_t extra, int refuse)
{
    uint64_t reserved = pool_reserved(dev), need = live[dev] + extra;
    uint64_t target = need > reserved ? need : reserved;
    if (target > charged[dev]) {
        uint64_t more = target - charged[dev];
        if (refuse) {
            if (reserve(dev, more) != CUDA_SUCCESS)
                return CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            (void)ledger_charge(&g_shim.ledger, (unsigned)dev, more, 1);
        }
    } else if (target < charged[dev]) {
        unreserve(dev, charged[dev] - target);
    }
    charged[dev] = target;
    live[dev] = need;
    return CUDA_SUCCESS;
}

#define INSTANTIATE(exec_ptr, graph, call)                                                         \
    do {                                                                                           \
        if (mode() != SHIM_LIMITED)                                                                \
            return call;                                                                           \
        int dev_, ordinal_ = -1;                                                                   \
        uint64_t foot_ = graph_footprint((graph), &dev_, &ordinal_);                               \
        if (!foot_)                                                                                \
            return call;                                                                           \
        pthread_mutex_lock(&graph_mu);                                                             \
        ordinal_of[dev_] = ordinal_ + 1;                                                           \
        CUresult rc_ = settle(dev_, foot_, 1);                                                     \
        pthread_mutex_unlock(&graph_mu);                                                           \
        if (rc_ != CUDA_SUCCESS)                                                                   \
            return rc_;                                                                            \
        rc_ = call;                                                                                \
        pthread_mutex_lock(&graph_mu);                                                             \
        if (rc_ == CUDA_SUCCESS && (exec_ptr))                                                     \
            track(PT_KIND_GRAPH ^ (uint64_t)(uintptr_t)*(exec_ptr), dev_, foot_, NULL);            \
        else { /* not made: what it would have needed goes */                                      \
            live[dev_] -= foot_;                                                                   \
            (void)settle(dev_, 0, 0);                                                              \
        }                                                                                          \
        pthread_mutex_unlock(&graph_mu);                                                           \
        return rc_;                                                                                \
    } while (0)

EXPORT CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                   char *logBuffer, size_t bufferSize)
{
    INSTANTIATE(phGraphExec, hGraph, REAL(cuGraphInstantiate)(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize));
}

EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                      char *logBuffer, size_t bufferSize)
{
    INSTANTIATE(phGraphExec, hGraph,
                REAL(cuGraphInstantiate_v2)(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize));
}

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    INSTANTIATE(phGraphExec, hGraph, REAL(cuGraphInstantiateWithFlags)(phGraphExec, hGraph, flags));
}

EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    INSTANTIATE(phGraphExec, hGraph, REAL(cuGraphInstantiateWithParams)(phGraphExec, hGraph, instantiateParams));
}

EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
    INSTANTIATE(phGraphExec, hGraph,
                REAL(cuGraphInstantiateWithParams_ptsz)(phGraphExec, hGraph, instantiateParams));
}

EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    CUresult rc = REAL(cuGraphExecDestroy)(hGraphExec);
    struct untracked u;
    if (rc == CUDA_SUCCESS && mode() == SHIM_LIMITED && untrack(PT_KIND_GRAPH ^ (uint64_t)(uintptr_t)hGraphExec, &u)) {
        pthread_mutex_lock(&graph_mu);
        live[u.dev] -= u.charge;
        (void)settle(u.dev, 0, 0); /* what the pool still keeps stays charged */
        pthread_mutex_unlock(&graph_mu);
    }
    return rc;
}

EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device)
{
    CUresult rc = REAL(cuDeviceGraphMemTrim)(device);
    int dev = device_of_ordinal(device);
    if (rc == CUDA_SUCCESS && dev >= 0 && mode() == SHIM_LIMITED) {
        pthread_mutex_lock(&graph_mu);
        if (ordinal_of[dev])
            (void)settle(dev, 0, 0);
        pthread_mutex_unlock(&graph_mu);
    }
    return rc;
}
