/* The simulated CUDA driver (libcuda.so.1).  Streams and events on the
 * kernel timeline: a stream's work is done when the device has run the
 * process's work up to its queue's last_end (a mark, cuda_sim.h), an event
 * completes when the work recorded before it is done.  When that happens
 * depends on what other processes launch later, so it is looked up when asked
 * (work_done, wait_mark). */
#include "cuda_sim.h"

/* ------------------------------------------------------------------------ */
/* Streams and events                                                        */

/* The mark of the work queued so far on stream `s`, and its device; the legacy
 * stream waits for every stream of its context. */
static CUresult stream_end(CUstream s, int *phys, unsigned long long *end)
{
    NEED_INIT();
    struct sim_ctx *c;
    struct sim_queue *q;
    LOCK();
    CUresult rc = stream_queue(s, &c, &q);
    if (!rc) {
        *end = q == &c->q_legacy ? c->last_end : q->last_end;
        *phys = c->phys;
    }
    UNLOCK();
    return rc;
}

static CUresult stream_sync(CUstream s)
{
    unsigned long long end;
    int phys;
    CUresult rc = stream_end(s, &phys, &end);
    if (!rc) {
        wait_mark(phys, end);
        LOCK();
        pools_settle_locked();
        UNLOCK();
    }
    return rc;
}

static CUresult stream_query(CUstream s)
{
    unsigned long long end;
    int phys;
    CUresult rc = stream_end(s, &phys, &end);
    if (rc || (end && work_done(phys) < end))
        return rc ? rc : CUDA_ERROR_NOT_READY;
    mem_settle();
    return CUDA_SUCCESS;
}

static CUresult stream_create(CUstream *ph, unsigned int flags, int priority)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_stream *s =
        obj_new(sizeof *s + (size_t)drv.cfg.queue_depth * sizeof *s->q.ends, O_STREAM, c);
    if (s) {
        s->q.ends = (unsigned long long *)(s + 1);
        s->flags = flags;
        s->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority;
        s->id = ++drv.next_id;
    }
    UNLOCK();
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *ph = (CUstream)s;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return stream_create(phStream, Flags, 0);
}

SIM_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    return stream_create(phStream, flags, priority);
}

SIM_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
    NEED_INIT();
    LOCK();
    struct sim_stream *s = obj_get(hStream, O_STREAM);
    if (s)
        obj_free(s);
    UNLOCK();
    return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIM_API CUresult cuStreamDestroy(CUstream hStream)
{
    return cuStreamDestroy_v2(hStream);
}

SIM_API CUresult cuStreamSynchronize(CUstream hStream) { return stream_sync(hStream); }
SIM_API CUresult cuStreamSynchronize_ptsz(CUstream hStream) { return stream_sync(hStream); }
SIM_API CUresult cuStreamQuery(CUstream hStream) { return stream_query(hStream); }
SIM_API CUresult cuStreamQuery_ptsz(CUstream hStream) { return stream_query(hStream); }

/* Work queued on `s` after this starts when the event's work has ended. */
static CUresult stream_wait(CUstream s, CUevent e, unsigned int flags)
{
    CUresult rc = stream_check(s);
    if (rc)
        return rc;
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c;
    struct sim_queue *q;
    LOCK();
    struct sim_event *ev = obj_get(e, O_EVENT);
    rc = !ev ? CUDA_ERROR_INVALID_HANDLE : stream_queue(s, &c, &q);
    int phys = rc ? 0 : ev->phys;
    unsigned long long mark = rc || !ev->recorded ? 0 : ev->mark;
    if (mark && phys == c->phys && mark > q->last_end)
        q->last_end = mark; /* the device runs the process's work in order anyway */
    UNLOCK();
    if (mark && phys != c->phys)
        wait_mark(phys, mark); /* another device's work: wait here (not modelled in order) */
    return rc;
}

SIM_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{ return stream_wait(hStream, hEvent, Flags); }
SIM_API CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{ return stream_wait(hStream, hEvent, Flags); }

SIM_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!phEvent || (Flags & ~0xfu))
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_event *e = obj_new(sizeof *e, O_EVENT, c);
    if (e)
        e->flags = Flags;
    UNLOCK();
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phEvent = (CUevent)e;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuEventDestroy_v2(CUevent hEvent)
{
    NEED_INIT();
    LOCK();
    struct sim_event *e = obj_get(hEvent, O_EVENT);
    if (e)
        obj_free(e);
    UNLOCK();
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

SIM_API CUresult cuEventDestroy(CUevent hEvent)
{
    return cuEventDestroy_v2(hEvent);
}

/* The event completes when the work queued on `s` before it has ended. */
static CUresult event_record(CUevent e, CUstream s)
{
    NEED_INIT();
    struct sim_ctx *c;
    struct sim_queue *q;
    LOCK();
    struct sim_event *ev = obj_get(e, O_EVENT);
    CUresult rc = !ev ? CUDA_ERROR_INVALID_HANDLE : stream_queue(s, &c, &q);
    if (!rc) {
        ev->mark = q == &c->q_legacy ? c->last_end : q->last_end;
        ev->phys = c->phys;
        ev->recorded = 1;
        /* done already: completes now; otherwise when the device runs that work */
        ev->time = work_done(c->phys) >= ev->mark ? sim_now_ns() : 0;
    }
    UNLOCK();
    return rc;
}

/* Whether a recorded event has completed, noting when (drv.mu held). */
static int event_done_locked(struct sim_event *ev)
{
    if (!ev->recorded || ev->time)
        return 1;
    if (work_done(ev->phys) < ev->mark)
        return 0;
    ev->time = mark_time(ev->phys, ev->mark);
    return 1;
}

/* What the event waits for (mark 0: never recorded, complete). */
static CUresult event_mark(CUevent e, int *phys, unsigned long long *mark)
{
    NEED_INIT();
    LOCK();
    struct sim_event *ev = obj_get(e, O_EVENT);
    if (ev) {
        *phys = ev->phys;
        *mark = ev->recorded && !ev->time ? ev->mark : 0;
    }
    UNLOCK();
    return ev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult event_sync(CUevent e)
{
    unsigned long long t;
    int phys;
    CUresult rc = event_mark(e, &phys, &t);
    if (!rc) {
        wait_mark(phys, t);
        LOCK();
        pools_settle_locked();
        UNLOCK();
    }
    return rc;
}

static CUresult event_query(CUevent e)
{
    NEED_INIT();
    LOCK();
    struct sim_event *ev = obj_get(e, O_EVENT);
    int done = ev ? event_done_locked(ev) : 0;
    UNLOCK();
    if (!ev || !done)
        return ev ? CUDA_ERROR_NOT_READY : CUDA_ERROR_INVALID_HANDLE;
    mem_settle();
    return CUDA_SUCCESS;
}

SIM_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream); }
SIM_API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream); }
SIM_API CUresult cuEventSynchronize(CUevent hEvent) { return event_sync(hEvent); }
SIM_API CUresult cuEventQuery(CUevent hEvent) { return event_query(hEvent); }

/* ---- Stream queries ---- */

/* The context and properties of stream `s`; the NULL, legacy and per-thread
 * handles have flags 0, priority 0 and ids 0, 0 and 1. */
static CUresult stream_info(CUstream s, struct sim_ctx **ctx, struct sim_stream *out)
{
    NEED_INIT();
    LOCK();
    CUresult rc = stream_ctx(s, ctx);
    if (!rc) {
        struct sim_stream *st = obj_get(s, O_STREAM);
        if (st)
            *out = *st;
        else
            *out = (struct sim_stream){.id = s == CU_STREAM_PER_THREAD};
    }
    UNLOCK();
    return rc;
}

#define STREAM_INFO(s)                           \
    struct sim_ctx *c;                           \
    struct sim_stream info;                      \
    CUresult rc = stream_info(s, &c, &info);     \
    if (rc)                                      \
        return rc

static CUresult stream_flags(CUstream s, unsigned int *flags)
{
    STREAM_INFO(s);
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = info.flags;
    return CUDA_SUCCESS;
}

static CUresult stream_priority(CUstream s, int *priority)
{
    STREAM_INFO(s);
    if (!priority)
        return CUDA_ERROR_INVALID_VALUE;
    *priority = info.priority;
    return CUDA_SUCCESS;
}

static CUresult stream_id(CUstream s, unsigned long long *id)
{
    STREAM_INFO(s);
    if (!id)
        return CUDA_ERROR_INVALID_VALUE;
    *id = info.id;
    return CUDA_SUCCESS;
}

static CUresult stream_getctx(CUstream s, CUcontext *pctx, CUgreenCtx *green)
{
    STREAM_INFO(s);
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)c;
    if (green)
        *green = NULL;
    return CUDA_SUCCESS;
}

static CUresult stream_device(CUstream s, CUdevice *dev)
{
    STREAM_INFO(s);
    if (!dev)
        return CUDA_ERROR_INVALID_VALUE;
    *dev = drv.ord[c->phys];
    return CUDA_SUCCESS;
}

/* Whether a stream is capturing (cuda_graph.c begins and ends it). */
static CUresult stream_capturing(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                 CUgraph *graph, const CUgraphNode **deps,
                                 const CUgraphEdgeData **edges, size_t *ndeps)
{
    STREAM_INFO(s);
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    *status = info.capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    if (id)
        *id = info.capture ? info.capture_id : 0;
    if (graph)
        *graph = (CUgraph)info.capture;
    if (deps)
        *deps = NULL;
    if (edges)
        *edges = NULL;
    if (ndeps)
        *ndeps = 0;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{ return stream_flags(hStream, flags); }
SIM_API CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags)
{ return stream_flags(hStream, flags); }
SIM_API CUresult cuStreamGetPriority(CUstream hStream, int *priority)
{ return stream_priority(hStream, priority); }
SIM_API CUresult cuStreamGetPriority_ptsz(CUstream hStream, int *priority)
{ return stream_priority(hStream, priority); }
SIM_API CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{ return stream_id(hStream, streamId); }
SIM_API CUresult cuStreamGetId_ptsz(CUstream hStream, unsigned long long *streamId)
{ return stream_id(hStream, streamId); }
SIM_API CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{ return stream_getctx(hStream, pctx, NULL); }
SIM_API CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx)
{ return stream_getctx(hStream, pctx, NULL); }
SIM_API CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pctx, CUgreenCtx *pGreenCtx)
{ return stream_getctx(hStream, pctx, pGreenCtx); }
SIM_API CUresult cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext *pctx, CUgreenCtx *pGreenCtx)
{ return stream_getctx(hStream, pctx, pGreenCtx); }
SIM_API CUresult cuStreamGetDevice(CUstream hStream, CUdevice *device)
{ return stream_device(hStream, device); }
SIM_API CUresult cuStreamGetDevice_ptsz(CUstream hStream, CUdevice *device)
{ return stream_device(hStream, device); }
SIM_API CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{ return stream_capturing(hStream, captureStatus, NULL, NULL, NULL, NULL, NULL); }
SIM_API CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{ return stream_capturing(hStream, captureStatus, NULL, NULL, NULL, NULL, NULL); }
SIM_API CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                        cuuint64_t *id_out)
{ return stream_capturing(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL); }
SIM_API CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                             cuuint64_t *id_out)
{ return stream_capturing(hStream, captureStatus_out, id_out, NULL, NULL, NULL, NULL); }
SIM_API CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                           cuuint64_t *id_out, CUgraph *graph_out,
                                           const CUgraphNode **dependencies_out,
                                           size_t *numDependencies_out)
{
    return stream_capturing(hStream, captureStatus_out, id_out, graph_out, dependencies_out, NULL,
                            numDependencies_out);
}
SIM_API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
                                                CUstreamCaptureStatus *captureStatus_out,
                                                cuuint64_t *id_out, CUgraph *graph_out,
                                                const CUgraphNode **dependencies_out,
                                                size_t *numDependencies_out)
{
    return stream_capturing(hStream, captureStatus_out, id_out, graph_out, dependencies_out, NULL,
                            numDependencies_out);
}
SIM_API CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                           cuuint64_t *id_out, CUgraph *graph_out,
                                           const CUgraphNode **dependencies_out,
                                           const CUgraphEdgeData **edgeData_out,
                                           size_t *numDependencies_out)
{
    return stream_capturing(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                            edgeData_out, numDependencies_out);
}
SIM_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                                CUstreamCaptureStatus *captureStatus_out,
                                                cuuint64_t *id_out, CUgraph *graph_out,
                                                const CUgraphNode **dependencies_out,
                                                const CUgraphEdgeData **edgeData_out,
                                                size_t *numDependencies_out)
{
    return stream_capturing(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                            edgeData_out, numDependencies_out);
}

/* Host functions and callbacks run in the calling thread once the work
 * queued before them has ended (the call waits for it). */
static CUresult host_func(CUstream s, CUhostFn fn, void *data)
{
    CUresult rc = stream_check(s);
    if (rc)
        return rc;
    if (!fn)
        return CUDA_ERROR_INVALID_VALUE;
    rc = stream_sync(s);
    if (rc)
        return rc;
    fn(data);
    return CUDA_SUCCESS;
}

static CUresult add_callback(CUstream s, CUstreamCallback cb, void *data, unsigned int flags)
{
    CUresult rc = stream_check(s);
    if (rc)
        return rc;
    if (!cb || flags)
        return CUDA_ERROR_INVALID_VALUE;
    rc = stream_sync(s);
    if (rc)
        return rc;
    cb(s, CUDA_SUCCESS, data);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{ return host_func(hStream, fn, userData); }
SIM_API CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{ return host_func(hStream, fn, userData); }
SIM_API CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
                                     unsigned int flags)
{ return add_callback(hStream, callback, userData, flags); }
SIM_API CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback,
                                          void *userData, unsigned int flags)
{ return add_callback(hStream, callback, userData, flags); }

/* ---- Event queries ---- */

static CUresult record_with_flags(CUevent e, CUstream s, unsigned int flags)
{
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
        return INITED() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return event_record(e, s);
}

SIM_API CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{ return record_with_flags(hEvent, hStream, flags); }
SIM_API CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags)
{ return record_with_flags(hEvent, hStream, flags); }

/* The time between the two events' completions on the timeline. */
static CUresult elapsed(float *ms, CUevent start, CUevent end)
{
    NEED_INIT();
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_event *a = obj_get(start, O_EVENT), *b = obj_get(end, O_EVENT);
    CUresult rc = !a || !b ? CUDA_ERROR_INVALID_HANDLE
                  : (a->flags | b->flags) & CU_EVENT_DISABLE_TIMING ? CUDA_ERROR_INVALID_HANDLE
                  : !a->recorded || !b->recorded ? CUDA_ERROR_INVALID_HANDLE
                  : CUDA_SUCCESS;
    if (!rc && !(event_done_locked(a) & event_done_locked(b)))
        rc = CUDA_ERROR_NOT_READY;
    if (!rc)
        *ms = (float)(((double)b->time - (double)a->time) / 1e6);
    UNLOCK();
    return rc;
}

SIM_API CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{ return elapsed(pMilliseconds, hStart, hEnd); }
SIM_API CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{ return elapsed(pMilliseconds, hStart, hEnd); }
