"""A hand-written protobuf wire codec for the kubelet's side of the tests.

It is written from the kubelet API's field numbers, independently of the plugin's .proto and
generated modules, so a wrong field number in the plugin shows up as a test failure.
"""

from __future__ import annotations

from typing import Any

from protowire import bytes_field, decode, flag, string_map, strings, text, texts, varint_field

# Field numbers of k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1 and podresources/v1.
REGISTER = {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}
OPTIONS = {"pre_start_required": 1, "get_preferred_allocation_available": 2}
DEVICE = {"ID": 1, "health": 2, "topology": 3}
PREF_CONTAINER_REQ = {"available": 1, "must_include": 2, "size": 3}
ALLOC_RESP = {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5}
MOUNT = {"container_path": 1, "host_path": 2, "read_only": 3}


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
