"""Names shared by every part that injects cgpu into a container or reads what it injected."""

from __future__ import annotations

import re

# Where the injected pieces appear inside a container (device plugin, hook and CDI alike).
CONTAINER_SHIM = "/usr/local/cgpu/libcgpu.so"
CONTAINER_PRELOAD = "/etc/ld.so.preload"
CONTAINER_LEDGER_DIR = "/var/run/cgpu"

# The files of a container directory (`<state>/containers/<key>/`).
CONFIG_NAME = "cgpu.conf"
LEDGER_NAME = "cgpu.ledger"
META_NAME = "meta.json"
COMPUTE_SOCKET_NAME = "compute.sock"  # the compute arbiter's, for the container's processes
PRELOAD_NAME = "ld.so.preload"  # the hook's merged copy of the image's file

# Who made a container directory: meta.json's "source".
SOURCE_DEVICE_PLUGIN = "device-plugin"
SOURCE_HOOK = "hook"
SOURCE_RUN = "run"
SOURCE_DRA = "dra"  # a DRA claim's directory (cgpu dra-driver), one per prepared claim

# The DRA driver's name (and its DeviceClass's), as the driver, the exporter and inspect know it.
DRA_DRIVER = "gpu.cgpu.io"

# A GPU UUID as config files, the shim and the hook accept it.
UUID_RE = re.compile(r"^[A-Za-z0-9-]{1,95}$")

# The annotation the device plugin puts on a container it has already given a slice.
KEY_ANNOTATION = "cgpu.io/container-key"

# The CRI annotations that name a container, per label: CRI-O's (and the kubelet's) first,
# then containerd's.
CRI_LABEL_ANNOTATIONS: dict[str, tuple[str, str]] = {
    "namespace": ("io.kubernetes.pod.namespace", "io.kubernetes.cri.sandbox-namespace"),
    "pod": ("io.kubernetes.pod.name", "io.kubernetes.cri.sandbox-name"),
    "container": ("io.kubernetes.container.name", "io.kubernetes.cri.container-name"),
}
