/* The simulated NVML (libnvidia-ml.so.1).  Every NVML function that
 * nvidia-ml-py binds and nvml_sim.c does not model (nvml_stubs.inc, generated
 * by gen_tables.py): exported, so that tools which look them up start, and
 * answering NVML_ERROR_NOT_SUPPORTED (NVML_ERROR_UNINITIALIZED before
 * nvmlInit).  The stubs take no parameters: on the SysV ABI a caller's
 * arguments are simply ignored.  This file deliberately does not include the
 * NVML header, whose prototypes these definitions do not repeat. */
#include "sim_common.h"

int nvml_sim_unmodelled(const char *name);

#define NVML_STUB(name) \
    SIM_API int name(void); \
    SIM_API int name(void) { return nvml_sim_unmodelled(#name); }
#include "nvml_stubs.inc"
