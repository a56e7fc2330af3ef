/* The simulated CUDA driver (libcuda.so.1). Streams and events. */
#include "cuda_sim.h"

/* ------------------------------------------------------------------------ */
/* Streams and events                                                        */

/* drv.mu held. */
CUresult stream_ctx(CUstream s, struct sim_ctx **out)
{
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return cur_ctx(out);
    struct sim_stream *st = obj_get(s, O_STREAM);
    if (!st)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!atomic_load(&st->hdr.ctx->alive))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *out = st->hdr.ctx;
    return CUDA_SUCCESS;
}

CUresult stream_check(CUstream s)
{
    NEED_INIT();
    struct sim_ctx *c;
    LOCK();
    CUresult rc = stream_ctx(s, &c);
    UNLOCK();
    return rc;
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
    struct sim_stream *s = obj_new(sizeof *s, O_STREAM, c);
    if (s) {
        s->flags = flags;
        s->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority;
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

SIM_API CUresult cuStreamSynchronize(CUstream hStream) { return stream_check(hStream); }
SIM_API CUresult cuStreamSynchronize_ptsz(CUstream hStream) { return stream_check(hStream); }
SIM_API CUresult cuStreamQuery(CUstream hStream) { return stream_check(hStream); }
SIM_API CUresult cuStreamQuery_ptsz(CUstream hStream) { return stream_check(hStream); }

static CUresult event_check(CUevent e)
{
    NEED_INIT();
    LOCK();
    struct sim_event *ev = obj_get(e, O_EVENT);
    UNLOCK();
    return ev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult stream_wait(CUstream s, CUevent e, unsigned int flags)
{
    CUresult rc = stream_check(s);
    if (rc)
        return rc;
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    return event_check(e);
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

static CUresult event_record(CUevent e, CUstream s)
{
    CUresult rc = event_check(e);
    return rc ? rc : stream_check(s);
}

SIM_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream); }
SIM_API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream); }
SIM_API CUresult cuEventSynchronize(CUevent hEvent) { return event_check(hEvent); }
SIM_API CUresult cuEventQuery(CUevent hEvent) { return event_check(hEvent); }
