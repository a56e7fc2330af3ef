/* The contract names of the C side: the environment variables, files and config keywords that
 * another program (cgpu's Python, the device plugin, the hook, an operator, a test) knows the
 * shim and the simulator by.  The one home of each in C; every file of native/ uses these, never
 * the string.  Each is `CGPU_<name>` for the `<name>` of cgpu/core/layout.py, the home on the
 * Python side, with the same value: tests/core/test_c_names.py checks the two agree, and that no
 * C file writes one of layout.py's names out itself.  Names only: nothing here is computed. */
#ifndef CGPU_NAMES_H
#define CGPU_NAMES_H

/* ---- the limit variables (request.c; the rules are in cgpu_api.h) ---------------------- */
#define CGPU_ENV_DISABLE "CGPU_DISABLE"
#define CGPU_ENV_MEM_LIMIT "CGPU_MEM_LIMIT" /* and CGPU_MEM_LIMIT_<i> */
#define CGPU_ENV_COMPUTE_LIMIT "CGPU_COMPUTE_LIMIT" /* and CGPU_COMPUTE_LIMIT_<i> */
#define CGPU_ENV_COMPUTE_POLICY "CGPU_COMPUTE_POLICY"
#define CGPU_ENV_COMPUTE_PRIORITY "CGPU_COMPUTE_PRIORITY"
#define CGPU_ENV_GPU_MEM_CONTAINER "ALIYUN_COM_GPU_MEM_CONTAINER"
#define CGPU_ENV_GPU_MEM_DEV "ALIYUN_COM_GPU_MEM_DEV"
#define CGPU_ENV_VOLCANO_ALLOCATED "VOLCANO_GPU_ALLOCATED"
#define CGPU_ENV_VOLCANO_TOTAL "VOLCANO_GPU_MEMORY_TOTAL"

/* ---- the shim's other variables --------------------------------------------------------- */
#define CGPU_ENV_LEDGER_DIR "CGPU_LEDGER_DIR"
#define CGPU_ENV_CONTEXT_OVERHEAD "CGPU_CONTEXT_OVERHEAD"
#define CGPU_ENV_COMPUTE_TRACE "CGPU_COMPUTE_TRACE"

/* ---- the container directory ------------------------------------------------------------ */
#define CGPU_CONTAINER_LEDGER_DIR "/var/run/cgpu" /* where it is mounted inside a container */
#define CGPU_CONFIG_NAME "cgpu.conf"
#define CGPU_LEDGER_NAME "cgpu.ledger"
#define CGPU_COMPUTE_SOCKET_NAME "compute.sock"

/* ---- cgpu.conf's keywords (config.c) ---------------------------------------------------- */
#define CGPU_CONF_VERSION "version"
#define CGPU_CONF_DEVICE "device"
#define CGPU_CONF_COMPUTE "compute"
#define CGPU_CONF_CONTEXT "context"
#define CGPU_POLICY_FIXED "fixed"
#define CGPU_POLICY_SHARE "share"
#define CGPU_PRIORITY_HIGH "high"
#define CGPU_PRIORITY_NORMAL "normal"
#define CGPU_PRIORITY_LOW "low"

/* ---- the simulator's variables (native/sim/README.md) ----------------------------------- */
#define CGPU_ENV_SIM_STATE "CGPU_SIM_STATE"
#define CGPU_ENV_SIM_DEVICES "CGPU_SIM_DEVICES"
#define CGPU_ENV_SIM_MEMORY "CGPU_SIM_MEMORY"
#define CGPU_ENV_SIM_UUIDS "CGPU_SIM_UUIDS"
#define CGPU_ENV_SIM_OTHER_USED "CGPU_SIM_OTHER_USED"
#define CGPU_ENV_SIM_NAME "CGPU_SIM_NAME"
#define CGPU_ENV_SIM_CTX_OVERHEAD "CGPU_SIM_CTX_OVERHEAD"
#define CGPU_ENV_SIM_GRANULARITY "CGPU_SIM_GRANULARITY"
#define CGPU_ENV_SIM_DRIVER_VERSION "CGPU_SIM_DRIVER_VERSION"
#define CGPU_ENV_SIM_DRIVER_RELEASE "CGPU_SIM_DRIVER_RELEASE"
#define CGPU_ENV_SIM_FAULTS "CGPU_SIM_FAULTS"
#define CGPU_ENV_SIM_KERNEL_NS "CGPU_SIM_KERNEL_NS"
#define CGPU_ENV_SIM_TIMESLICE_NS "CGPU_SIM_TIMESLICE_NS"
#define CGPU_ENV_SIM_SLICE_NS "CGPU_SIM_SLICE_NS"
#define CGPU_ENV_SIM_SWITCH_NS "CGPU_SIM_SWITCH_NS"
#define CGPU_ENV_SIM_UTIL_PERIOD_NS "CGPU_SIM_UTIL_PERIOD_NS"
#define CGPU_ENV_SIM_UTIL_ATTRIBUTION "CGPU_SIM_UTIL_ATTRIBUTION"
#define CGPU_ENV_SIM_QUEUE_DEPTH "CGPU_SIM_QUEUE_DEPTH"
#define CGPU_ENV_SIM_TRACE "CGPU_SIM_TRACE"

#endif
