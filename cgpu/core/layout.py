"""The one home of cgpu's contract names: resources, annotations, variables, paths, drivers.

Every name another program (the kubelet, a scheduler, the shim, an operator's manifests) knows
cgpu by is defined here and imported everywhere else; `tests/core/test_contract_names.py`
fails when one of these values appears as a literal in any other module. The C side's names are
in native/include/cgpu_names.h, each `CGPU_<name>` for a `<name>` here with the same value
(`tests/core/test_c_names.py`).
"""

from __future__ import annotations

import re

# --- Kubernetes resources ------------------------------------------------------------------
GPU_MEM = "aliyun.com/gpu-mem"  # gpushare's memory resource (node capacity, pod request)
GPU_COUNT = "aliyun.com/gpu-count"  # a node capacity (its GPUs), and a pod label (M GPUs)
GPU_CORE = "aliyun.com/gpu-core.percentage"  # the compute share: percent of one GPU
VOLCANO_GPU_MEMORY = "volcano.sh/gpu-memory"  # Volcano's memory resource (MiB)
VOLCANO_GPU_NUMBER = "volcano.sh/gpu-number"  # Volcano's node capacity: the node's GPUs

# --- Pod and node annotations --------------------------------------------------------------
# gpushare's, written by the scheduler extender and honoured by the device plugin.
GPU_MEM_IDX = "ALIYUN_COM_GPU_MEM_IDX"  # GPU index, or a comma list of them
GPU_MEM_POD = "ALIYUN_COM_GPU_MEM_POD"  # the pod's total units (also a container variable)
GPU_MEM_DEV = "ALIYUN_COM_GPU_MEM_DEV"  # one GPU's units (also a container variable)
GPU_MEM_ASSIGNED = "ALIYUN_COM_GPU_MEM_ASSIGNED"  # "true" once the device plugin served it
GPU_MEM_ASSUME_TIME = "ALIYUN_COM_GPU_MEM_ASSUME_TIME"  # Unix time in nanoseconds
# Volcano's, written by its scheduler (and by the device plugin on its node).
VOLCANO_GPU_INDEX = "volcano.sh/gpu-index"
VOLCANO_PREDICATE_TIME = "volcano.sh/predicate-time"
VOLCANO_GPU_ASSIGNED = "volcano.sh/gpu-assigned"
VOLCANO_UNHEALTHY_IDS = "volcano.sh/gpu-unhealthy-ids"  # a node annotation
# cgpu's own.
KEY_ANNOTATION = "cgpu.io/container-key"  # on a container the device plugin gave a slice
NODE_POLICY_ANNOTATION = "cgpu.io/node-policy"  # a pod's binpack|spread over nodes
GPU_POLICY_ANNOTATION = "cgpu.io/gpu-policy"  # a pod's binpack|spread over GPUs
COMPUTE_PRIORITY_ANNOTATION = "cgpu.io/compute-priority"  # a pod's high|normal|low compute turns

# The CRI annotations that name a container, per label: CRI-O's (and the kubelet's) first,
# then containerd's.
CRI_LABEL_ANNOTATIONS: dict[str, tuple[str, str]] = {
    "namespace": ("io.kubernetes.pod.namespace", "io.kubernetes.cri.sandbox-namespace"),
    "pod": ("io.kubernetes.pod.name", "io.kubernetes.cri.sandbox-name"),
    "container": ("io.kubernetes.container.name", "io.kubernetes.cri.container-name"),
}

# --- Container environment variables -------------------------------------------------------
ENV_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
ENV_GPU_MEM_CONTAINER = "ALIYUN_COM_GPU_MEM_CONTAINER"  # this container's units per GPU
ENV_GPU_MEM_DEV = GPU_MEM_DEV
ENV_GPU_MEM_IDX = GPU_MEM_IDX
ENV_GPU_MEM_POD = GPU_MEM_POD
ENV_VOLCANO_ALLOCATED = "VOLCANO_GPU_ALLOCATED"  # this container's MiB
ENV_VOLCANO_TOTAL = "VOLCANO_GPU_MEMORY_TOTAL"  # the card's MiB
ENV_LEDGER_DIR = "CGPU_LEDGER_DIR"
ENV_COMPUTE_LIMIT = "CGPU_COMPUTE_LIMIT"
ENV_MEM_LIMIT = "CGPU_MEM_LIMIT"  # a slice on every GPU (CGPU_MEM_LIMIT_<i>: on ordinal i)
ENV_COMPUTE_POLICY = "CGPU_COMPUTE_POLICY"  # POLICY_FIXED or POLICY_SHARE
ENV_COMPUTE_PRIORITY = "CGPU_COMPUTE_PRIORITY"  # PRIORITY_HIGH, PRIORITY_NORMAL or PRIORITY_LOW
ENV_DISABLE = "CGPU_DISABLE"  # true, 1 or yes: the shim stays out of the way
ENV_CONTEXT_OVERHEAD = "CGPU_CONTEXT_OVERHEAD"  # a context's cost where cgpu.conf gives none
ENV_COMPUTE_TRACE = "CGPU_COMPUTE_TRACE"  # a directory for the compute controller's trace
ENV_NATIVE_DIR = "CGPU_NATIVE_DIR"  # development builds: where the built libraries are
ENV_CDI_DEVICE_PREFIX = "CGPU_CDI_DEVICE_"  # CGPU_CDI_DEVICE_<index>=<uuid>, from `cgpu cdi`
# Prefixes of the variable families the limit parser and the context measurement look at.
ENV_PREFIX = "CGPU_"
ENV_SIM_PREFIX = "CGPU_SIM_"  # the simulator's own
ENV_SIM_STATE = "CGPU_SIM_STATE"  # the simulated GPU's state file, shared by its processes
# The simulator's other variables (native/sim/README.md says what each takes).
ENV_SIM_DEVICES = "CGPU_SIM_DEVICES"
ENV_SIM_MEMORY = "CGPU_SIM_MEMORY"
ENV_SIM_UUIDS = "CGPU_SIM_UUIDS"
ENV_SIM_OTHER_USED = "CGPU_SIM_OTHER_USED"
ENV_SIM_NAME = "CGPU_SIM_NAME"
ENV_SIM_CTX_OVERHEAD = "CGPU_SIM_CTX_OVERHEAD"
ENV_SIM_GRANULARITY = "CGPU_SIM_GRANULARITY"
ENV_SIM_DRIVER_VERSION = "CGPU_SIM_DRIVER_VERSION"
ENV_SIM_DRIVER_RELEASE = "CGPU_SIM_DRIVER_RELEASE"
ENV_SIM_FAULTS = "CGPU_SIM_FAULTS"
ENV_SIM_KERNEL_NS = "CGPU_SIM_KERNEL_NS"
ENV_SIM_TIMESLICE_NS = "CGPU_SIM_TIMESLICE_NS"
ENV_SIM_SLICE_NS = "CGPU_SIM_SLICE_NS"
ENV_SIM_SWITCH_NS = "CGPU_SIM_SWITCH_NS"
ENV_SIM_UTIL_PERIOD_NS = "CGPU_SIM_UTIL_PERIOD_NS"
ENV_SIM_UTIL_ATTRIBUTION = "CGPU_SIM_UTIL_ATTRIBUTION"
ENV_SIM_QUEUE_DEPTH = "CGPU_SIM_QUEUE_DEPTH"
ENV_SIM_TRACE = "CGPU_SIM_TRACE"
SIM_STATE_FILE = "sim-gpu.state"  # `cgpu run`'s, in the state dir
ENV_GPU_MEM_PREFIX = "ALIYUN_COM_GPU_MEM_"
ENV_VOLCANO_PREFIX = "VOLCANO_GPU_"

# --- Paths on the host -----------------------------------------------------------------------
DEFAULT_STATE_DIR = "/var/lib/cgpu"
CONTAINERS_SUBDIR = "containers"  # <state>/containers/<key>/: one directory per container
LIB_SUBDIR = "lib"  # <state>/lib/: the host's copy of the shim and its ld.so.preload
SHIM_NAME = "libcgpu.so"
KUBELET_DIR = "/var/lib/kubelet"
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
KUBELET_SOCKET = "kubelet.sock"  # the kubelet's registration socket in DEVICE_PLUGIN_DIR
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
CDI_DIR = "/var/run/cdi"  # the DRA driver's CDI specs
CDI_SPEC_FILE = "/etc/cdi/cgpu.json"  # `cgpu cdi`'s spec
MPS_ROOT = "/run/cgpu/mps"  # cgpu mps-daemon's pipe, log and shm directories
# <state>/compute-arbiter.json: `cgpu compute-arbiter`'s status, beside containers/ (host-written;
# read by the exporter and `cgpu ledger`, see cgpu.core.computestatus).
COMPUTE_STATUS_NAME = "compute-arbiter.json"

# --- Where the injected pieces appear inside a container (device plugin, hook, CDI) -------
CONTAINER_SHIM = "/usr/local/cgpu/libcgpu.so"
CONTAINER_PRELOAD = "/etc/ld.so.preload"
CONTAINER_LEDGER_DIR = "/var/run/cgpu"

# --- The files of a container directory (`<state>/containers/<key>/`) --------------------
CONFIG_NAME = "cgpu.conf"
LEDGER_NAME = "cgpu.ledger"
META_NAME = "meta.json"
COMPUTE_SOCKET_NAME = "compute.sock"  # the compute arbiter's, for the container's processes
PRELOAD_NAME = "ld.so.preload"  # the hook's merged copy of the image's file
# cgpu.conf's keywords: `version 1`, then per GPU `device <uuid> <bytes>`, with an optional
# `compute <uuid> <percent> [fixed|share] [high|normal|low]` and `context <uuid> <bytes>` after it.
CONF_VERSION = "version"
CONF_DEVICE = "device"
CONF_COMPUTE = "compute"
CONF_CONTEXT = "context"
POLICY_FIXED = "fixed"
POLICY_SHARE = "share"
PRIORITY_HIGH = "high"
PRIORITY_NORMAL = "normal"  # the default
PRIORITY_LOW = "low"

# Who made a container directory: meta.json's "source".
SOURCE_DEVICE_PLUGIN = "device-plugin"
SOURCE_HOOK = "hook"
SOURCE_RUN = "run"
SOURCE_DRA = "dra"  # a DRA claim's directory (cgpu dra-driver), one per prepared claim

# --- Drivers and CDI kinds -----------------------------------------------------------------
DRA_DRIVER = "gpu.cgpu.io"  # the DRA driver's name, and its DeviceClass's
WHOLE_GPU_CLASS = "whole-gpu.cgpu.io"  # the DeviceClass of whole GPUs (KEP-5004 mapping)
WHOLE_GPU_RESOURCE = "cgpu.io/gpu"  # that class's default extendedResourceName

# --- The admission webhook (`cgpu webhook`) ----------------------------------------------------
# On a pod it rewrote: what each container asked for before (JSON), so that inspect and an
# operator can see it, and so that nothing else translates the pod again.
WEBHOOK_ANNOTATION = "cgpu.io/gpushare-request"
WEBHOOK_CLAIM_PREFIX = "cgpu-gpu-"  # the pod's resourceClaims entries it adds
WEBHOOK_TEMPLATE_PREFIX = "cgpu-"  # the ResourceClaimTemplates it makes (shared by shape)
# The opaque parameters a webhook-made claim carries to the DRA driver (cgpu.core.claimconfig).
CLAIM_CONFIG_API_VERSION = "gpu.cgpu.io/v1alpha1"
CLAIM_CONFIG_KIND = "DevicePluginContract"
COMPUTE_CONFIG_KIND = "ComputeConfig"  # a claim's opaque compute parameters (its priority)
CDI_KIND = "cgpu.io/gpu-mem"  # `cgpu cdi`'s devices (GPUs by index, UUID or `all`)

# A GPU UUID as config files, the shim and the hook accept it.
UUID_RE = re.compile(r"^[A-Za-z0-9-]{1,95}$")
