"""A hand-written protobuf wire codec for the kubelet's side of the tests.

It is written from the kubelet API's field numbers, independently of the plugin's .proto and
generated modules, so a wrong field number in the plugin shows up as a test failure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# Field numbers of k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1 and podresources/v1.
REGISTER = {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}
OPTIONS = {"pre_start_required": 1, "get_preferred_allocation_available": 2}
DEVICE = {"ID": 1, "health": 2, "topology": 3}
PREF_CONTAINER_REQ = {"available": 1, "must_include": 2, "size": 3}
ALLOC_RESP = {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}
MOUNT = {"container_path": 1, "host_path": 2, "read_only": 3}


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def varint_field(number: int, value: int) -> bytes:
    """A wire-type-0 field."""
    return _varint(number << 3) + _varint(value)


def bytes_field(number: int, data: bytes | str) -> bytes:
    """A wire-type-2 field (string, bytes or embedded message)."""
    raw = data.encode() if isinstance(data, str) else data
    return _varint(number << 3 | 2) + _varint(len(raw)) + raw


def strings(number: int, values: Iterable[str]) -> bytes:
    """A repeated string field."""
    return b"".join(bytes_field(number, v) for v in values)


def decode(buf: bytes) -> dict[int, list[Any]]:
    """Fields of one message: number -> values (ints for varints, bytes otherwise)."""
    fields: dict[int, list[Any]] = {}
    pos = 0

    def read_varint() -> int:
        nonlocal pos
        shift = result = 0
        while True:
            byte = buf[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    while pos < len(buf):
        key = read_varint()
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value: Any = read_varint()
        elif wire_type == 2:
            length = read_varint()
            value = buf[pos : pos + length]
            pos += length
        elif wire_type == 1:
            value = buf[pos : pos + 8]
            pos += 8
        elif wire_type == 5:
            value = buf[pos : pos + 4]
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
        fields.setdefault(number, []).append(value)
    return fields


def text(fields: dict[int, list[Any]], number: int) -> str:
    """A singular string field ('' when absent)."""
    values = fields.get(number) or [b""]
    return values[-1].decode()


def texts(fields: dict[int, list[Any]], number: int) -> list[str]:
    """A repeated string field."""
    return [v.decode() for v in fields.get(number, [])]


def flag(fields: dict[int, list[Any]], number: int) -> bool:
    """A singular bool field."""
    return bool((fields.get(number) or [0])[-1])


def string_map(fields: dict[int, list[Any]], number: int) -> dict[str, str]:
    """A map<string, string> field (entries are messages with key 1, value 2)."""
    out = {}
    for entry in fields.get(number, []):
        parsed = decode(entry)
        out[text(parsed, 1)] = text(parsed, 2)
    return out


# Messages the kubelet sends or receives.


def register_request(buf: bytes) -> dict[str, Any]:
    """Decode a RegisterRequest."""
    f = decode(buf)
    opts = decode((f.get(REGISTER["options"]) or [b""])[-1])
    return {
        "version": text(f, REGISTER["version"]),
        "endpoint": text(f, REGISTER["endpoint"]),
        "resource_name": text(f, REGISTER["resource_name"]),
        "pre_start_required": flag(opts, OPTIONS["pre_start_required"]),
        "get_preferred_allocation_available": flag(
            opts, OPTIONS["get_preferred_allocation_available"]
        ),
    }


def plugin_options(buf: bytes) -> dict[str, bool]:
    """Decode DevicePluginOptions."""
    f = decode(buf)
    return {name: flag(f, number) for name, number in OPTIONS.items()}


def device_list(buf: bytes) -> list[tuple[str, str]]:
    """Decode a ListAndWatchResponse into [(ID, health)]."""
    out = []
    for raw in decode(buf).get(1, []):
        d = decode(raw)
        out.append((text(d, DEVICE["ID"]), text(d, DEVICE["health"])))
    return out


def preferred_request(containers: list[tuple[list[str], list[str], int]]) -> bytes:
    """Encode a PreferredAllocationRequest from (available, must_include, size) per container."""
    out = b""
    for available, must, size in containers:
        inner = (
            strings(PREF_CONTAINER_REQ["available"], available)
            + strings(PREF_CONTAINER_REQ["must_include"], must)
            + varint_field(PREF_CONTAINER_REQ["size"], size)
        )
        out += bytes_field(1, inner)
    return out


def preferred_response(buf: bytes) -> list[list[str]]:
    """Decode a PreferredAllocationResponse into device IDs per container."""
    return [texts(decode(raw), 1) for raw in decode(buf).get(1, [])]


def allocate_request(containers: list[list[str]]) -> bytes:
    """Encode an AllocateRequest from device IDs per container."""
    return b"".join(bytes_field(1, strings(1, ids)) for ids in containers)


def allocate_response(buf: bytes) -> list[dict[str, Any]]:
    """Decode an AllocateResponse: envs, mounts and annotations per container."""
    out = []
    for raw in decode(buf).get(1, []):
        c = decode(raw)
        mounts = []
        for m in c.get(ALLOC_RESP["mounts"], []):
            mf = decode(m)
            mounts.append(
                {
                    "container_path": text(mf, MOUNT["container_path"]),
                    "host_path": text(mf, MOUNT["host_path"]),
                    "read_only": flag(mf, MOUNT["read_only"]),
                }
            )
        out.append(
            {
                "envs": string_map(c, ALLOC_RESP["envs"]),
                "mounts": mounts,
                "annotations": string_map(c, ALLOC_RESP["annotations"]),
                "devices": c.get(ALLOC_RESP["devices"], []),
            }
        )
    return out


def prestart_request(ids: list[str]) -> bytes:
    """Encode a PreStartContainerRequest."""
    return strings(1, ids)


def pod_resources_list(pods: list[tuple[str, str, list[tuple[str, str, list[str]]]]]) -> bytes:
    """Encode a ListPodResourcesResponse from (namespace, pod, [(container, resource, ids)])."""
    out = b""
    for namespace, name, containers in pods:
        body = bytes_field(1, name) + bytes_field(2, namespace)
        for container, resource, ids in containers:
            devices = bytes_field(1, resource) + strings(2, ids) if ids else b""
            body += bytes_field(
                3, bytes_field(1, container) + (bytes_field(2, devices) if ids else b"")
            )
        out += bytes_field(1, body)
    return out
