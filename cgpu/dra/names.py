"""The DRA driver's fixed names: driver, plugin type, sockets and CDI kind."""

from __future__ import annotations

from cgpu.core.layout import DRA_DRIVER

PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_VERSIONS = ("v1.DRAPlugin",)  # the DRA gRPC services served, as the kubelet names them
REGISTRATION_SOCKET = f"{DRA_DRIVER}-reg.sock"  # in <kubelet-dir>/plugins_registry/
DRA_SOCKET = "dra.sock"  # in <kubelet-dir>/plugins/<driver>/
CDI_KIND = f"{DRA_DRIVER}/claim"  # one CDI device per prepared claim, named by the claim's UID
CDI_SPEC_PREFIX = f"{DRA_DRIVER}-claim_"  # <cdi-dir>/<prefix><claim uid>.json
MEMORY = "memory"
COMPUTE = "compute"
