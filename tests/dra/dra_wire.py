"""The kubelet's side of the DRA tests, on the wire.

Written from the field numbers of k8s.io/kubelet/pkg/apis/pluginregistration/v1 and
k8s.io/kubelet/pkg/apis/dra/v1, independently of the driver's .proto files and generated
modules (the codec is tests/protowire.py), so a wrong field number or package name in the
driver shows up as a test failure.
"""

from __future__ import annotations

from typing import Any

from protowire import bytes_field, decode, text, varint_field

# Full gRPC method names, as the kubelet calls them.
GET_INFO = "/pluginregistration.Registration/GetInfo"
NOTIFY = "/pluginregistration.Registration/NotifyRegistrationStatus"
PREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
UNPREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources"
WATCH_HEALTH = "/{version}.DRAResourceHealth/NodeWatchResources"  # v1, or v1alpha1
HEALTH = {0: "UNKNOWN", 1: "HEALTHY", 2: "UNHEALTHY"}


def plugin_info(buf: bytes) -> dict[str, Any]:
    """Decode a PluginInfo."""
    f = decode(buf)
    return {
        "type": text(f, 1),
        "name": text(f, 2),
        "endpoint": text(f, 3),
        "supported_versions": [v.decode() for v in f.get(4, [])],
    }


def registration_status(registered: bool, error: str = "") -> bytes:
    """Encode a RegistrationStatus."""
    return (varint_field(1, 1) if registered else b"") + (bytes_field(2, error) if error else b"")


def claims_request(claims: list[tuple[str, str, str]]) -> bytes:
    """Encode a Node(Un)PrepareResourcesRequest from (namespace, uid, name) per claim."""
    return b"".join(
        bytes_field(1, bytes_field(1, ns) + bytes_field(2, uid) + bytes_field(3, name))
        for ns, uid, name in claims
    )


def _claim_map(buf: bytes) -> dict[str, dict[int, list[Any]]]:
    out = {}
    for entry in decode(buf).get(1, []):
        f = decode(entry)
        out[text(f, 1)] = decode(f[2][-1]) if 2 in f else {}
    return out


def prepare_response(buf: bytes) -> dict[str, dict[str, Any]]:
    """Decode a NodePrepareResourcesResponse: {uid: {"devices": [...], "error": str}}."""
    out = {}
    for uid, f in _claim_map(buf).items():
        devices = []
        for raw in f.get(1, []):
            d = decode(raw)
            devices.append(
                {
                    "request_names": [v.decode() for v in d.get(1, [])],
                    "pool_name": text(d, 2),
                    "device_name": text(d, 3),
                    "cdi_device_ids": [v.decode() for v in d.get(4, [])],
                    "share_id": text(d, 5),
                }
            )
        out[uid] = {"devices": devices, "error": text(f, 2)}
    return out


def unprepare_response(buf: bytes) -> dict[str, str]:
    """Decode a NodeUnprepareResourcesResponse: {uid: error}."""
    return {uid: text(f, 1) for uid, f in _claim_map(buf).items()}


def health_response(buf: bytes) -> dict[tuple[str, str], dict[str, Any]]:
    """Decode a NodeWatchResourcesResponse: {(pool, device): {health, message, timeout}}."""
    out = {}
    for raw in decode(buf).get(1, []):
        f = decode(raw)
        ident = decode(f[1][-1]) if 1 in f else {}
        out[(text(ident, 1), text(ident, 2))] = {
            "health": HEALTH[f.get(2, [0])[-1]],
            "updated": f.get(3, [0])[-1],
            "timeout": f.get(4, [0])[-1],
            "message": text(f, 5),
        }
    return out
