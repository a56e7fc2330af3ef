/* The simulated CUDA driver (libcuda.so.1).  Graphs: kernel nodes and memory
 * nodes.  Launching an executable graph queues its kernels on the stream in the
 * order they were added (the device runs one kernel at a time anyway).
 *
 * Memory nodes (cuGraphAddMemAllocNode, cuGraphAddMemFreeNode), as the driver
 * handles them: an allocation node gets its virtual address when it is added, fixed
 * for the graph's life; a graph with memory nodes has at most one executable graph
 * at a time.  Physical memory comes from the device's graph memory pool when the
 * executable graph is first launched or uploaded: what the pool keeps unused serves
 * first, the rest is charged to the device, and a launch it does not fit in fails
 * with CUDA_ERROR_OUT_OF_MEMORY.  Destroying the executable graph returns its
 * memory to the pool, which keeps it reserved (and charged) until
 * cuDeviceGraphMemTrim.  cuDeviceGetGraphMemAttribute reports the pool.  An
 * executable graph's footprint on a device is the sum of its allocations, each
 * rounded to the granularity (the driver may reuse memory between allocations
 * whose lifetimes do not overlap; the sum is what it may need).  The bytes of
 * graph memory are not modelled: copies to its addresses fail.
 *
 * Stream capture (cuStreamBeginCapture .. cuStreamEndCapture) on a created stream
 * records kernels, cuMemAllocAsync and cuMemFreeAsync into the graph instead of
 * running them: a captured cuMemAllocAsync is an allocation node, as in the driver. */
#include "cuda_sim.h"

#include "cgpu_sizes.h"

enum { NODE_KERNEL = 1, NODE_MEM_ALLOC, NODE_MEM_FREE };

struct sim_graph {
    struct obj hdr;
    unsigned long long *ns;        /* each kernel node's duration */
    size_t n, cap;
    unsigned long long foot[SIM_MAX_DEVICES]; /* its allocation nodes' footprint */
    int mem_nodes;                 /* has allocation or free nodes */
    int execs;                     /* live executable graphs made from it */
    unsigned stack;                /* the most stack a kernel node's function needs */
};

struct sim_graph_node {
    struct obj hdr;
    struct sim_graph *graph;
    int type;
    int phys;                      /* allocation node: its device */
    unsigned long long dptr, bytes, foot; /* allocation: address, size, footprint; free: address */
    CUDA_MEM_ALLOC_NODE_PARAMS params;
};

struct sim_graph_exec {
    struct obj hdr;
    struct sim_graph *graph;       /* while it lives: its graph (NULL once destroyed) */
    unsigned long long foot[SIM_MAX_DEVICES];
    int mapped;                    /* its footprint is taken from the graph memory pool */
    unsigned stack;                /* the most stack a kernel node's function needs */
    size_t n;
    unsigned long long ns[];
};

/* Each device's graph memory pool: reserved = in use by executable graphs + kept unused
 * (in drv, so that a forked child starts without the parent's). */
#define gmem_used drv.gmem_used
#define gmem_kept drv.gmem_kept
#define gmem_used_high drv.gmem_used_high
#define gmem_reserved_high drv.gmem_reserved_high

/* Take an executable graph's footprint from the pools (drv.mu held). */
static CUresult gmem_map(struct sim_graph_exec *x)
{
    if (x->mapped)
        return CUDA_SUCCESS;
    unsigned long long fresh[SIM_MAX_DEVICES] = {0};
    CUresult rc = CUDA_SUCCESS;
    int d = 0;
    for (; d < SIM_MAX_DEVICES && !rc; d++) {
        unsigned long long need = x->foot[d];
        fresh[d] = need > gmem_kept[d] ? need - gmem_kept[d] : 0;
        rc = charge(d, fresh[d]);
    }
    if (rc) {
        for (int u = 0; u < d - 1; u++)
            uncharge(u, fresh[u]);
        return rc;
    }
    for (d = 0; d < SIM_MAX_DEVICES; d++) {
        gmem_kept[d] -= x->foot[d] - fresh[d];
        gmem_used[d] += x->foot[d];
        if (gmem_used[d] > gmem_used_high[d])
            gmem_used_high[d] = gmem_used[d];
        if (gmem_used[d] + gmem_kept[d] > gmem_reserved_high[d])
            gmem_reserved_high[d] = gmem_used[d] + gmem_kept[d];
    }
    x->mapped = 1;
    return CUDA_SUCCESS;
}

/* Give an executable graph's footprint back to the pools, which keep it (drv.mu held). */
static void gmem_unmap(struct sim_graph_exec *x)
{
    if (!x->mapped)
        return;
    for (int d = 0; d < SIM_MAX_DEVICES; d++) {
        gmem_used[d] -= x->foot[d];
        gmem_kept[d] += x->foot[d];
    }
    x->mapped = 0;
}

SIM_API CUresult cuDeviceGraphMemTrim(CUdevice device)
{
    NEED_INIT();
    int phys = dev_phys(device);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    uncharge(phys, gmem_kept[phys]);
    gmem_kept[phys] = 0;
    UNLOCK();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    NEED_INIT();
    int phys = dev_phys(device);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    LOCK();
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = gmem_used[phys]; break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = gmem_used_high[phys]; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = gmem_used[phys] + gmem_kept[phys]; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = gmem_reserved_high[phys]; break;
    default: rc = CUDA_ERROR_INVALID_VALUE;
    }
    UNLOCK();
    return rc;
}

/* Only the high watermarks can be set, and only to 0 (which resets them to the current). */
SIM_API CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    NEED_INIT();
    int phys = dev_phys(device);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!value || *(cuuint64_t *)value != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    LOCK();
    if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
        gmem_used_high[phys] = gmem_used[phys];
    else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
        gmem_reserved_high[phys] = gmem_used[phys] + gmem_kept[phys];
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    UNLOCK();
    return rc;
}

SIM_API CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    NEED_INIT();
    if (!phGraph || flags)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_graph *g = obj_new(sizeof *g, O_GRAPH, NULL);
    UNLOCK();
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphDestroy(CUgraph hGraph)
{
    NEED_INIT();
    LOCK();
    struct sim_graph *g = obj_get(hGraph, O_GRAPH);
    void **doomed = g ? malloc((drv.objs.n + 1) * sizeof *doomed) : NULL;
    if (g && doomed) {
        size_t n = 0;
        for (size_t i = 0; i < drv.objs.cap; i++) { /* its nodes */
            struct sim_graph_node *nd = drv.objs.vals[i];
            if (nd && nd->hdr.type == O_GRAPH_NODE && nd->graph == g)
                doomed[n++] = nd;
        }
        for (size_t i = 0; i < n; i++) {
            struct sim_graph_node *nd = doomed[i];
            /* An allocation's address stays taken while an executable graph may use it. */
            if (nd->type == NODE_MEM_ALLOC && !g->execs)
                zone_give(&drv.zone[1], nd->dptr, nd->foot);
            obj_free(nd);
        }
        for (size_t i = 0; i < drv.objs.cap; i++) { /* its executable graphs outlive it */
            struct sim_graph_exec *x = drv.objs.vals[i];
            if (x && x->hdr.type == O_GRAPH_EXEC && x->graph == g)
                x->graph = NULL;
        }
        free(g->ns);
        obj_free(g);
    }
    free(doomed);
    if (g && !doomed) {
        UNLOCK();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    UNLOCK();
    return g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult add_kernel_node(CUgraphNode *ph, CUgraph hGraph, const CUgraphNode *deps,
                                size_t ndeps, CUfunction f, void **params, void **extra)
{
    NEED_INIT();
    if (!ph || (ndeps && !deps))
        return CUDA_ERROR_INVALID_VALUE;
    /* The duration is taken now: the driver copies the parameters here. */
    unsigned long long ns = 0;
    unsigned stack = 0;
    CUresult rc = kernel_duration(f, params, extra, &ns, &stack);
    if (rc)
        return rc;
    LOCK();
    struct sim_graph *g = obj_get(hGraph, O_GRAPH);
    if (!g)
        rc = CUDA_ERROR_INVALID_HANDLE;
    for (size_t i = 0; i < ndeps && !rc; i++) {
        struct sim_graph_node *d = obj_get(deps[i], O_GRAPH_NODE);
        if (!d || d->graph != g)
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    struct sim_graph_node *nd = NULL;
    if (!rc && g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 8;
        unsigned long long *v = realloc(g->ns, cap * sizeof *v);
        if (v) {
            g->ns = v;
            g->cap = cap;
        }
    }
    if (!rc && stack > g->stack)
        g->stack = stack;
    if (!rc && g->n < g->cap && (nd = obj_new(sizeof *nd, O_GRAPH_NODE, NULL))) {
        nd->graph = g;
        nd->type = NODE_KERNEL;
        g->ns[g->n++] = ns;
    } else if (!rc) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    UNLOCK();
    if (!rc)
        *ph = (CUgraphNode)nd;
    return rc;
}

SIM_API CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                      const CUgraphNode *dependencies, size_t numDependencies,
                                      const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
    if (!p)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies, p->func,
                           p->kernelParams, p->extra);
}

SIM_API CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies, size_t numDependencies,
                                         const CUDA_KERNEL_NODE_PARAMS_v2 *p)
{
    if (!p)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies,
                           p->func ? p->func : (CUfunction)p->kern, p->kernelParams, p->extra);
}

static CUresult instantiate(CUgraphExec *ph, CUgraph hGraph)
{
    NEED_INIT();
    if (!ph)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_graph *g = obj_get(hGraph, O_GRAPH);
    struct sim_graph_exec *x = NULL;
    /* A graph with memory nodes has at most one executable graph at a time. */
    int twice = g && g->mem_nodes && g->execs;
    if (g && !twice && (x = obj_new(sizeof *x + g->n * sizeof *x->ns, O_GRAPH_EXEC, NULL))) {
        x->n = g->n;
        x->graph = g;
        x->stack = g->stack;
        g->execs++;
        memcpy(x->foot, g->foot, sizeof x->foot);
        if (g->n)
            memcpy(x->ns, g->ns, g->n * sizeof *x->ns);
    }
    UNLOCK();
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    if (twice)
        return CUDA_ERROR_INVALID_VALUE;
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ph = (CUgraphExec)x;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                    CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize)
{ return instantiate(phGraphExec, hGraph); }
SIM_API CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                       CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize)
{ return instantiate(phGraphExec, hGraph); }
SIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             unsigned long long flags)
{ return instantiate(phGraphExec, hGraph); }

static CUresult instantiate_params(CUgraphExec *ph, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    if (!p)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = instantiate(ph, g);
    p->result_out = rc ? CUDA_GRAPH_INSTANTIATE_ERROR : CUDA_GRAPH_INSTANTIATE_SUCCESS;
    p->hErrNode_out = NULL;
    return rc;
}

SIM_API CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{ return instantiate_params(phGraphExec, hGraph, instantiateParams); }
SIM_API CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{ return instantiate_params(phGraphExec, hGraph, instantiateParams); }

SIM_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    NEED_INIT();
    LOCK();
    struct sim_graph_exec *x = obj_get(hGraphExec, O_GRAPH_EXEC);
    if (x) {
        gmem_unmap(x);
        if (x->graph)
            x->graph->execs--;
        obj_free(x);
    }
    UNLOCK();
    return x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult graph_launch(CUgraphExec hGraphExec, CUstream s)
{
    NEED_INIT();
    LOCK();
    struct sim_graph_exec *x = obj_get(hGraphExec, O_GRAPH_EXEC);
    CUresult rc = x ? gmem_map(x) : CUDA_ERROR_INVALID_HANDLE;
    size_t n = x && !rc ? x->n : 0;
    unsigned stack = x ? x->stack : 0;
    unsigned long long *ns = n ? malloc(n * sizeof *ns) : NULL;
    if (ns)
        memcpy(ns, x->ns, n * sizeof *ns);
    UNLOCK();
    if (rc)
        return rc;
    if (n && !ns)
        return CUDA_ERROR_OUT_OF_MEMORY;
    rc = stream_check(s);
    if (!rc && stack > 1024) /* its kernels' stack, as their launches grow it one by one */
        rc = ctx_stack_for_launch(stack);
    for (size_t i = 0; i < n && !rc; i++)
        rc = launch_work(s, ns[i]);
    free(ns);
    return rc;
}

SIM_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{ return graph_launch(hGraphExec, hStream); }
SIM_API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{ return graph_launch(hGraphExec, hStream); }

/* Uploading maps the graph's memory ahead of its first launch. */
static CUresult graph_upload(CUgraphExec hGraphExec, CUstream s)
{
    NEED_INIT();
    CUresult rc = stream_check(s);
    if (rc)
        return rc;
    LOCK();
    struct sim_graph_exec *x = obj_get(hGraphExec, O_GRAPH_EXEC);
    rc = x ? gmem_map(x) : CUDA_ERROR_INVALID_HANDLE;
    UNLOCK();
    return rc;
}

SIM_API CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{ return graph_upload(hGraphExec, hStream); }
SIM_API CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{ return graph_upload(hGraphExec, hStream); }

/* A new node of `g` after `deps` (drv.mu held); NULL with *rc set. */
static struct sim_graph_node *node_new(struct sim_graph *g, const CUgraphNode *deps, size_t ndeps,
                                       CUresult *rc)
{
    *rc = CUDA_SUCCESS;
    if (!g) {
        *rc = CUDA_ERROR_INVALID_HANDLE;
        return NULL;
    }
    for (size_t i = 0; i < ndeps; i++) {
        struct sim_graph_node *d = obj_get(deps[i], O_GRAPH_NODE);
        if (!d || d->graph != g) {
            *rc = CUDA_ERROR_INVALID_VALUE;
            return NULL;
        }
    }
    struct sim_graph_node *nd = obj_new(sizeof *nd, O_GRAPH_NODE, NULL);
    if (!nd)
        *rc = CUDA_ERROR_OUT_OF_MEMORY;
    else
        nd->graph = g;
    return nd;
}

/* Add an allocation node of `p->bytesize` bytes on `phys` to `g` (drv.mu held). */
static CUresult alloc_node_locked(struct sim_graph *g, const CUgraphNode *deps, size_t ndeps, int phys,
                                  CUDA_MEM_ALLOC_NODE_PARAMS *p, CUgraphNode *out)
{
    unsigned long long gran = drv.cfg.granularity;
    unsigned long long foot = cgpu_pages(p->bytesize, gran), at = 0; /* as the shim charges it */
    CUresult rc;
    struct sim_graph_node *nd = node_new(g, deps, ndeps, &rc);
    if (nd && zone_take(&drv.zone[1], foot, gran, 0, &at)) {
        obj_free(nd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!nd)
        return rc;
    nd->type = NODE_MEM_ALLOC;
    nd->phys = phys;
    nd->dptr = at;
    nd->bytes = p->bytesize;
    nd->foot = foot;
    nd->params = *p;
    nd->params.accessDescs = NULL;
    nd->params.accessDescCount = 0;
    nd->params.dptr = at;
    g->foot[phys] += foot;
    g->mem_nodes = 1;
    p->dptr = at;
    *out = (CUgraphNode)nd;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                        const CUgraphNode *dependencies, size_t numDependencies,
                                        CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    NEED_INIT();
    if (!phGraphNode || !p || (numDependencies && !dependencies) || !p->bytesize)
        return CUDA_ERROR_INVALID_VALUE;
    /* Device memory only: pinned, on a device. */
    if (p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    int phys = dev_phys(p->poolProps.location.id);
    if (phys < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCK();
    CUresult rc = alloc_node_locked(obj_get(hGraph, O_GRAPH), dependencies, numDependencies, phys, p, phGraphNode);
    UNLOCK();
    return rc;
}

/* Add a free node of graph allocation `dptr` to `g` (drv.mu held). */
static CUresult free_node_locked(struct sim_graph *g, const CUgraphNode *deps, size_t ndeps, CUdeviceptr dptr,
                                 CUgraphNode *out)
{
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    /* Only a graph allocation can be freed by a free node. */
    int known = 0;
    for (size_t i = 0; i < drv.objs.cap && !known; i++) {
        struct sim_graph_node *a = drv.objs.vals[i];
        known = a && a->hdr.type == O_GRAPH_NODE && a->type == NODE_MEM_ALLOC && a->dptr == dptr;
    }
    if (!known)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc;
    struct sim_graph_node *nd = node_new(g, deps, ndeps, &rc);
    if (nd) {
        nd->type = NODE_MEM_FREE;
        nd->dptr = dptr;
        g->mem_nodes = 1;
        *out = (CUgraphNode)nd;
    }
    return rc;
}

SIM_API CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                       const CUgraphNode *dependencies, size_t numDependencies,
                                       CUdeviceptr dptr)
{
    NEED_INIT();
    if (!phGraphNode || (numDependencies && !dependencies))
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    CUresult rc = free_node_locked(obj_get(hGraph, O_GRAPH), dependencies, numDependencies, dptr, phGraphNode);
    UNLOCK();
    return rc;
}

/* ---- stream capture ---------------------------------------------------------------- */

/* A captured stream-ordered allocation becomes an allocation node of the device's graph
 * memory; a captured free, a free node; a captured launch, a kernel node.  Each capture
 * appends to its graph without dependencies (the simulator runs a graph's nodes in the
 * order they were added). */
static CUresult cap_alloc(void *graph, int phys, unsigned long long bytes, CUdeviceptr *out)
{
    CUDA_MEM_ALLOC_NODE_PARAMS p = {.bytesize = bytes};
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = drv.ord[phys];
    CUgraphNode nd;
    CUresult rc = alloc_node_locked(obj_get(graph, O_GRAPH), NULL, 0, phys, &p, &nd);
    if (!rc)
        *out = p.dptr;
    return rc;
}

static CUresult cap_free(void *graph, CUdeviceptr dptr)
{
    CUgraphNode nd;
    return free_node_locked(obj_get(graph, O_GRAPH), NULL, 0, dptr, &nd);
}

static CUresult cap_kernel(void *graph, unsigned long long ns)
{
    struct sim_graph *g = obj_get(graph, O_GRAPH);
    if (!g)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 8;
        unsigned long long *v = realloc(g->ns, cap * sizeof *v);
        if (!v)
            return CUDA_ERROR_OUT_OF_MEMORY;
        g->ns = v;
        g->cap = cap;
    }
    CUresult rc;
    struct sim_graph_node *nd = node_new(g, NULL, 0, &rc);
    if (nd) {
        nd->type = NODE_KERNEL;
        g->ns[g->n++] = ns;
    }
    return rc;
}

/* A graph allocation outlives its graph's launch until freed in stream order outside the
 * graph; its memory stays mapped to the executable graph either way. */
static int is_graph_mem(CUdeviceptr dptr)
{
    for (size_t i = 0; i < drv.objs.cap; i++) {
        struct sim_graph_node *a = drv.objs.vals[i];
        if (a && a->hdr.type == O_GRAPH_NODE && a->type == NODE_MEM_ALLOC && a->dptr == dptr)
            return 1;
    }
    return 0;
}

static const struct sim_capture_ops capture_ops_graph = {cap_alloc, cap_free, cap_kernel, is_graph_mem};

__attribute__((constructor)) static void capture_init(void)
{
    capture_register(&capture_ops_graph);
}

/* Only created streams capture here (the legacy and per-thread streams: unsupported). */
static CUresult begin_capture(CUstream s, CUgraph into)
{
    NEED_INIT();
    LOCK();
    struct sim_ctx *c;
    CUresult rc = stream_ctx(s, &c);
    struct sim_stream *st = rc ? NULL : obj_get(s, O_STREAM);
    struct sim_graph *g = NULL;
    if (!rc && !st)
        rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else if (!rc && st->capture)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    else if (!rc && into && !(g = obj_get(into, O_GRAPH)))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (!rc && !into && !(g = obj_new(sizeof *g, O_GRAPH, NULL)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rc) {
        st->capture = g;
        st->capture_id = ++drv.next_id;
    }
    UNLOCK();
    return rc;
}

SIM_API CUresult cuStreamBeginCapture(CUstream hStream) { return begin_capture(hStream, NULL); }
SIM_API CUresult cuStreamBeginCapture_ptsz(CUstream hStream) { return begin_capture(hStream, NULL); }
SIM_API CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{ return mode > CU_STREAM_CAPTURE_MODE_RELAXED ? CUDA_ERROR_INVALID_VALUE : begin_capture(hStream, NULL); }
SIM_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{ return mode > CU_STREAM_CAPTURE_MODE_RELAXED ? CUDA_ERROR_INVALID_VALUE : begin_capture(hStream, NULL); }

SIM_API CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                             const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                             CUstreamCaptureMode mode)
{
    if (!hGraph || (numDependencies && !dependencies) || mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return begin_capture(hStream, hGraph);
}

SIM_API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                  const CUgraphNode *dependencies,
                                                  const CUgraphEdgeData *dependencyData,
                                                  size_t numDependencies, CUstreamCaptureMode mode)
{
    return cuStreamBeginCaptureToGraph(hStream, hGraph, dependencies, dependencyData, numDependencies, mode);
}

static CUresult end_capture(CUstream s, CUgraph *out)
{
    NEED_INIT();
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_ctx *c;
    CUresult rc = stream_ctx(s, &c);
    struct sim_stream *st = rc ? NULL : obj_get(s, O_STREAM);
    if (!rc && (!st || !st->capture))
        rc = CUDA_ERROR_ILLEGAL_STATE;
    if (!rc) {
        *out = (CUgraph)st->capture;
        st->capture = NULL;
    }
    UNLOCK();
    return rc;
}

SIM_API CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) { return end_capture(hStream, phGraph); }
SIM_API CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) { return end_capture(hStream, phGraph); }

SIM_API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
    NEED_INIT();
    if (!params_out)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_graph_node *nd = obj_get(hNode, O_GRAPH_NODE);
    CUresult rc = !nd ? CUDA_ERROR_INVALID_HANDLE : nd->type != NODE_MEM_ALLOC ? CUDA_ERROR_INVALID_VALUE : 0;
    if (!rc)
        *params_out = nd->params;
    UNLOCK();
    return rc;
}

SIM_API CUresult cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out)
{
    NEED_INIT();
    if (!dptr_out)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_graph_node *nd = obj_get(hNode, O_GRAPH_NODE);
    CUresult rc = !nd ? CUDA_ERROR_INVALID_HANDLE : nd->type != NODE_MEM_FREE ? CUDA_ERROR_INVALID_VALUE : 0;
    if (!rc)
        *dptr_out = nd->dptr;
    UNLOCK();
    return rc;
}

SIM_API CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
    NEED_INIT();
    if (!type)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_graph_node *nd = obj_get(hNode, O_GRAPH_NODE);
    if (nd)
        *type = nd->type == NODE_MEM_ALLOC ? CU_GRAPH_NODE_TYPE_MEM_ALLOC
                : nd->type == NODE_MEM_FREE ? CU_GRAPH_NODE_TYPE_MEM_FREE : CU_GRAPH_NODE_TYPE_KERNEL;
    UNLOCK();
    return nd ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* The nodes of a graph; with nodes NULL, only their count. */
SIM_API CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    NEED_INIT();
    if (!numNodes)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_graph *g = obj_get(hGraph, O_GRAPH);
    size_t n = 0;
    for (size_t i = 0; g && i < drv.objs.cap; i++) {
        struct sim_graph_node *nd = drv.objs.vals[i];
        if (!nd || nd->hdr.type != O_GRAPH_NODE || nd->graph != g)
            continue;
        if (nodes && n < *numNodes)
            nodes[n] = (CUgraphNode)nd;
        n++;
    }
    if (g && nodes) {
        for (size_t i = n; i < *numNodes; i++)
            nodes[i] = NULL;
        if (n > *numNodes)
            n = *numNodes;
    }
    UNLOCK();
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    *numNodes = n;
    return CUDA_SUCCESS;
}
