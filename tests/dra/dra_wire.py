"""A hand-written protobuf wire codec for the kubelet's side of the DRA tests.

Written from the field numbers of k8s.io/kubelet/pkg/apis/pluginregistration/v1 and
k8s.io/kubelet/pkg/apis/dra/v1, independently of the driver's .proto files and generated
modules, so a wrong field number or package name in the driver shows up as a test failure.
"""

from __future__ import annotations

from typing import Any

# Full gRPC method names, as the kubelet calls them.
GET_INFO = "/pluginregistration.Registration/GetInfo"
NOTIFY = "/pluginregistration.Registration/NotifyRegistrationStatus"
PREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
UNPREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources"
WATCH_HEALTH = "/{version}.DRAResourceHealth/NodeWatchResources"  # v1, or v1alpha1
HEALTH = {0: "UNKNOWN", 1: "HEALTHY", 2: "UNHEALTHY"}


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, data: bytes | str) -> bytes:
    raw = data.encode() if isinstance(data, str) else data
    return _varint(number << 3 | 2) + _varint(len(raw)) + raw


def decode(buf: bytes) -> dict[int, list[Any]]:
    """Fields of one message: number -> values (ints for varints, bytes otherwise)."""
    fields: dict[int, list[Any]] = {}
    pos = 0

    def varint() -> int:
        nonlocal pos
        shift = result = 0
        while True:
            byte = buf[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return result

    while pos < len(buf):
        key = varint()
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value: Any = varint()
        elif wire_type == 2:
            length = varint()
            value = bytes(buf[pos : pos + length])
            pos += length
        else:
            raise ValueError(f"unexpected wire type {wire_type} for field {number}")
        fields.setdefault(number, []).append(value)
    return fields


def _text(fields: dict[int, list[Any]], number: int) -> str:
    return fields[number][-1].decode() if number in fields else ""


def plugin_info(buf: bytes) -> dict[str, Any]:
    """Decode a PluginInfo."""
    f = decode(buf)
    return {
        "type": _text(f, 1),
        "name": _text(f, 2),
        "endpoint": _text(f, 3),
        "supported_versions": [v.decode() for v in f.get(4, [])],
    }


def registration_status(registered: bool, error: str = "") -> bytes:
    """Encode a RegistrationStatus."""
    return (_varint(1 << 3) + _varint(1) if registered else b"") + (
        _field(2, error) if error else b""
    )


def claims_request(claims: list[tuple[str, str, str]]) -> bytes:
    """Encode a Node(Un)PrepareResourcesRequest from (namespace, uid, name) per claim."""
    return b"".join(
        _field(1, _field(1, ns) + _field(2, uid) + _field(3, name)) for ns, uid, name in claims
    )


def _claim_map(buf: bytes) -> dict[str, dict[int, list[Any]]]:
    out = {}
    for entry in decode(buf).get(1, []):
        f = decode(entry)
        out[_text(f, 1)] = decode(f[2][-1]) if 2 in f else {}
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
                    "pool_name": _text(d, 2),
                    "device_name": _text(d, 3),
                    "cdi_device_ids": [v.decode() for v in d.get(4, [])],
                    "share_id": _text(d, 5),
                }
            )
        out[uid] = {"devices": devices, "error": _text(f, 2)}
    return out


def unprepare_response(buf: bytes) -> dict[str, str]:
    """Decode a NodeUnprepareResourcesResponse: {uid: error}."""
    return {uid: _text(f, 1) for uid, f in _claim_map(buf).items()}


def health_response(buf: bytes) -> dict[tuple[str, str], dict[str, Any]]:
    """Decode a NodeWatchResourcesResponse: {(pool, device): {health, message, timeout}}."""
    out = {}
    for raw in decode(buf).get(1, []):
        f = decode(raw)
        ident = decode(f[1][-1]) if 1 in f else {}
        out[(_text(ident, 1), _text(ident, 2))] = {
            "health": HEALTH[f.get(2, [0])[-1]],
            "updated": f.get(3, [0])[-1],
            "timeout": f.get(4, [0])[-1],
            "message": _text(f, 5),
        }
    return out
