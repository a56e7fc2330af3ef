"""A hand-written protobuf wire codec, for the tests' kubelet-side peers.

The peers (tests/deviceplugin/kubelet_wire.py, tests/dra/dra_wire.py) are written from the
kubelet APIs' field numbers, independently of cgpu's .proto files and generated modules, so a
wrong field number in cgpu shows up as a test failure. This is the codec they share.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def varint(value: int) -> bytes:
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
    return varint(number << 3) + varint(value)


def bytes_field(number: int, data: bytes | str) -> bytes:
    """A wire-type-2 field (string, bytes or embedded message)."""
    raw = data.encode() if isinstance(data, str) else data
    return varint(number << 3 | 2) + varint(len(raw)) + raw


def strings(number: int, values: Iterable[str]) -> bytes:
    """A repeated string field."""
    return b"".join(bytes_field(number, v) for v in values)


def decode(buf: bytes) -> dict[int, list[Any]]:
    """Fields of one message: number -> values (ints for varints, bytes otherwise)."""
    fields: dict[int, list[Any]] = {}
    pos = 0

    def readvarint() -> int:
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
        key = readvarint()
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value: Any = readvarint()
        elif wire_type == 2:
            length = readvarint()
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
