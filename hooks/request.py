"""What a container asks for: its slice, read from the contract's limit variables.

The sources are taken in the shim's order, and the first one present is the only one read:
`CGPU_MEM_LIMIT_<i>`/`CGPU_MEM_LIMIT`, then `ALIYUN_COM_GPU_MEM_CONTAINER` over
`ALIYUN_COM_GPU_MEM_DEV`, then `VOLCANO_GPU_ALLOCATED` over `VOLCANO_GPU_MEMORY_TOTAL`.
A malformed value is a RequestError that names the variable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cgpu.core.config import ConfigError, parse_size
from cgpu.hooks.errors import RequestError

_ORDINAL_RE = re.compile(r"^CGPU_MEM_LIMIT_(0|[1-9][0-9]{0,2})$")
_UNITS_RE = re.compile(r"^[0-9]{1,12}$")
SHARE_SOURCES = (
    ("ALIYUN_COM_GPU_MEM_CONTAINER", "ALIYUN_COM_GPU_MEM_DEV"),
    ("VOLCANO_GPU_ALLOCATED", "VOLCANO_GPU_MEMORY_TOTAL"),
)


@dataclass(frozen=True)
class Fixed:
    """Slices in bytes: one for every device, and overrides by device ordinal."""

    default: int | None
    by_ordinal: dict[int, int]


@dataclass(frozen=True)
class Share:
    """A share of each device: floor(total x units / of)."""

    units: int
    of: int


Request = Fixed | Share


def _size(name: str, value: str) -> int:
    try:
        size = parse_size(value.strip())
    except ConfigError as exc:
        raise RequestError(f"{name}: {exc}") from None
    if size <= 0:
        raise RequestError(f"{name}: a slice must be more than 0 bytes")
    return size


def _units(name: str, env: dict[str, str]) -> int:
    value = env.get(name)
    if value is None:
        raise RequestError(f"{name} is not set, but its pair is")
    if not _UNITS_RE.match(value.strip()) or int(value) <= 0:
        raise RequestError(f"{name}: expected a positive integer, got {value[:40]!r}")
    return int(value)


def disabled(env: dict[str, str]) -> bool:
    """Whether the container opted out with CGPU_DISABLE=true (gpushare's escape hatch)."""
    return env.get("CGPU_DISABLE", "").strip().lower() == "true"


def parse_request(env: dict[str, str]) -> Request | None:
    """The container's request, or None when it sets no limit variable."""
    ordinals = {int(m.group(1)): v for k, v in env.items() if (m := _ORDINAL_RE.match(k))}
    if ordinals or "CGPU_MEM_LIMIT" in env:
        default = env.get("CGPU_MEM_LIMIT")
        return Fixed(
            default=_size("CGPU_MEM_LIMIT", default) if default is not None else None,
            by_ordinal={i: _size(f"CGPU_MEM_LIMIT_{i}", v) for i, v in sorted(ordinals.items())},
        )
    for units_name, of_name in SHARE_SOURCES:
        if units_name in env or of_name in env:
            units, of = _units(units_name, env), _units(of_name, env)
            if units > of:
                raise RequestError(f"{units_name}: {units} is more than {of_name} ({of})")
            return Share(units, of)
    return None
