/* The simulated CUDA driver (libcuda.so.1).  Graphs, minimally: kernel nodes
 * only; launching an executable graph queues its kernels on the stream in the
 * order they were added (the device runs one kernel at a time anyway). */
#include "cuda_sim.h"

struct sim_graph {
    struct obj hdr;
    unsigned long long *ns;        /* each kernel node's duration */
    size_t n, cap;
};

struct sim_graph_node {
    struct obj hdr;
    struct sim_graph *graph;
};

struct sim_graph_exec {
    struct obj hdr;
    size_t n;
    unsigned long long ns[];
};

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
        for (size_t i = 0; i < n; i++)
            obj_free(doomed[i]);
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
    CUresult rc = kernel_duration(f, params, extra, &ns);
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
    if (!rc && g->n < g->cap && (nd = obj_new(sizeof *nd, O_GRAPH_NODE, NULL))) {
        nd->graph = g;
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
    if (g && (x = obj_new(sizeof *x + g->n * sizeof *x->ns, O_GRAPH_EXEC, NULL))) {
        x->n = g->n;
        if (g->n)
            memcpy(x->ns, g->ns, g->n * sizeof *x->ns);
    }
    UNLOCK();
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
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
    if (x)
        obj_free(x);
    UNLOCK();
    return x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult graph_launch(CUgraphExec hGraphExec, CUstream s)
{
    NEED_INIT();
    LOCK();
    struct sim_graph_exec *x = obj_get(hGraphExec, O_GRAPH_EXEC);
    size_t n = x ? x->n : 0;
    unsigned long long *ns = n ? malloc(n * sizeof *ns) : NULL;
    if (ns)
        memcpy(ns, x->ns, n * sizeof *ns);
    UNLOCK();
    if (!x)
        return CUDA_ERROR_INVALID_HANDLE;
    if (n && !ns)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = stream_check(s);
    for (size_t i = 0; i < n && !rc; i++)
        rc = launch_work(s, ns[i]);
    free(ns);
    return rc;
}

SIM_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{ return graph_launch(hGraphExec, hStream); }
SIM_API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{ return graph_launch(hGraphExec, hStream); }
