/* The simulated CUDA driver (libcuda.so.1).  Inter-process handles: enough
 * for programs that export and open device memory and events (numba, pycuda,
 * torch.multiprocessing) to run.  A handle names the exporting process and
 * the allocation; opening it in another process maps a fresh address range
 * there that is not charged again: the memory stays the exporter's, and both
 * see the same bytes (the exporter's backing file, cuda_backing.c). */
#include "cuda_sim.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#define IPC_MAGIC "cgpuipc"

struct ipc_mem {
    char magic[8];
    int pid;
    int phys;
    unsigned long long start_time, base, size, id;
    unsigned long long off; /* the bytes: at `off` in the exporter's file `fd` */
    int fd;
};

struct ipc_event {
    char magic[8];
    int pid;
    unsigned int flags;
    unsigned long long start_time;
};

_Static_assert(sizeof(struct ipc_mem) <= CU_IPC_HANDLE_SIZE, "IPC memory handle too large");
_Static_assert(sizeof(struct ipc_event) <= CU_IPC_HANDLE_SIZE, "IPC event handle too large");

SIM_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    NEED_INIT();
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    struct ipc_mem h = {.magic = IPC_MAGIC, .pid = getpid()};
    LOCK();
    struct region *r = live_exact(dptr);
    /* Only plain device allocations can be exported (not pool, managed or
     * imported memory), as with the real driver. */
    rc = CUDA_ERROR_INVALID_VALUE;
    if (r && r->kind == R_ALLOC && !r->pool && !r->managed && !r->ipc && r->phys >= 0) {
        h.phys = r->phys;
        h.base = r->base;
        h.size = r->req;
        h.id = r->id;
        h.fd = backing_fd(r->base, &h.off);
        r->touched = 1; /* an importer may write it: free must give its pages back */
        rc = h.fd >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    UNLOCK();
    if (rc)
        return rc;
    h.start_time = sim_proc_start_time(h.pid);
    memset(pHandle, 0, sizeof *pHandle);
    memcpy(pHandle->reserved, &h, sizeof h);
    return CUDA_SUCCESS;
}

static CUresult ipc_open(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
    NEED_INIT();
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    if (!pdptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return CUDA_ERROR_INVALID_VALUE;
    struct ipc_mem h;
    memcpy(&h, handle.reserved, sizeof h);
    if (memcmp(h.magic, IPC_MAGIC, sizeof h.magic) || !h.size || h.pid <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (h.pid == getpid())
        return CUDA_ERROR_INVALID_CONTEXT; /* as the driver: not in the exporter */
    if (!sim_pid_alive(h.pid, h.start_time))
        return CUDA_ERROR_INVALID_VALUE;
    /* The exporter's bytes: its device memory file, opened through /proc. */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", h.pid, h.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    rc = mem_alloc_locked(c, -1, h.size, 0, 0, NULL, pdptr);
    if (!rc) {
        struct region *r = live_exact(*pdptr);
        if (backing_map(r->base, r->size, fd, h.off)) {
            region_free(r);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            r->ipc = 1;
            r->phys = c->phys; /* reported device; r->charge is 0 */
        }
    }
    UNLOCK();
    close(fd);
    return rc;
}

SIM_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return ipc_open(pdptr, handle, Flags);
}

SIM_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                       unsigned int Flags)
{
    return ipc_open(pdptr, handle, Flags);
}

SIM_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    NEED_INIT();
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    LOCK();
    struct region *r = live_exact(dptr);
    rc = r && r->kind == R_ALLOC && r->ipc ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (!rc)
        region_free(r);
    UNLOCK();
    return rc;
}

#define IPC_EVENT_FLAGS ((unsigned)(CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING))

SIM_API CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
    NEED_INIT();
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_event *e = obj_get(event, O_EVENT);
    unsigned flags = e ? e->flags : 0;
    UNLOCK();
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((flags & IPC_EVENT_FLAGS) != IPC_EVENT_FLAGS)
        return CUDA_ERROR_INVALID_VALUE;
    struct ipc_event h = {.magic = IPC_MAGIC, .pid = getpid(), .flags = flags};
    h.start_time = sim_proc_start_time(h.pid);
    memset(pHandle, 0, sizeof *pHandle);
    memcpy(pHandle->reserved, &h, sizeof h);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    struct sim_ctx *c;
    CUresult rc = cur_ctx(&c);
    if (rc)
        return rc;
    struct ipc_event h;
    memcpy(&h, handle.reserved, sizeof h);
    if (!phEvent || memcmp(h.magic, IPC_MAGIC, sizeof h.magic) || h.pid <= 0 ||
        (h.flags & IPC_EVENT_FLAGS) != IPC_EVENT_FLAGS)
        return CUDA_ERROR_INVALID_VALUE;
    LOCK();
    struct sim_event *e = obj_new(sizeof *e, O_EVENT, c);
    if (e)
        e->flags = h.flags;
    UNLOCK();
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *phEvent = (CUevent)e;
    return CUDA_SUCCESS;
}
