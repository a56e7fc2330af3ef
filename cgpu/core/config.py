"""The per-container config file (`cgpu.conf`): slices per device UUID."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from cgpu.core.files import atomic_write
from cgpu.core.layout import CONFIG_NAME, UUID_RE
from cgpu.core.native import load

MAX_DEVICES = 16
MAX_COMPUTE_PERCENT = 100


class ConfigError(ValueError):
    """A malformed config file or size."""


def parse_size(text: str) -> int:
    """Parse bytes or a size with a KiB/MiB/GiB/TiB or K/M/G/T suffix (powers of 1024)."""
    ffi, lib = load()
    out = ffi.new("unsigned long long *")
    if lib.cgpu_parse_size(text.encode(), out) != 0:
        raise ConfigError(f"malformed size {text!r}: expected bytes or a number with KiB/MiB/GiB")
    return int(out[0])


def slice_bytes(total_bytes: int, container_units: int, device_units: int) -> int:
    """The slice for CONTAINER of DEV units of a device: floor(total x CONTAINER / DEV)."""
    if device_units <= 0 or container_units <= 0 or container_units > device_units:
        raise ConfigError(f"invalid share {container_units}/{device_units}")
    return total_bytes * container_units // device_units


def validate_uuid(uuid: str) -> str:
    """Return `uuid` if it is safe to write into a config file, else raise ConfigError."""
    if not UUID_RE.match(uuid):
        raise ConfigError(f"invalid device UUID {uuid!r}")
    return uuid


def render_config(limits: Mapping[str, int], compute: Mapping[str, int] | None = None) -> str:
    """The text of a config file for {uuid: bytes}, and {uuid: percent} compute shares.

    A compute line names a device that has a `device` line, with a percentage from 1 to 100.
    """
    if not limits or len(limits) > MAX_DEVICES:
        raise ConfigError(f"a config needs 1 to {MAX_DEVICES} devices, got {len(limits)}")
    lines = ["# cgpu container config", "version 1"]
    for uuid, limit in limits.items():
        if limit <= 0:
            raise ConfigError(f"invalid slice {limit} for {uuid}")
        lines.append(f"device {validate_uuid(uuid)} {int(limit)}")
    for uuid, percent in (compute or {}).items():
        if uuid not in limits:
            raise ConfigError(f"compute share for {uuid!r}, which has no device line")
        if isinstance(percent, bool) or not 1 <= int(percent) <= MAX_COMPUTE_PERCENT:
            raise ConfigError(f"invalid compute share {percent!r} for {uuid}: 1 to 100 percent")
        lines.append(f"compute {uuid} {int(percent)}")
    return "\n".join(lines) + "\n"


def write_config(
    directory: str | os.PathLike[str],
    limits: Mapping[str, int],
    compute: Mapping[str, int] | None = None,
) -> Path:
    """Atomically write `cgpu.conf` into `directory`; returns its path.

    `compute` ({uuid: percent}) adds `compute <uuid> <percent>` lines after the device lines.
    """
    return atomic_write(Path(directory) / CONFIG_NAME, render_config(limits, compute))


def load_config(path: str | os.PathLike[str]) -> dict[str, int]:
    """Parse a config file with the shim's own parser; returns {uuid: bytes}."""
    ffi, lib = load()
    cfg = ffi.new("struct cgpu_config *")
    if lib.cgpu_config_load(str(path).encode(), cfg) != 0:
        raise ConfigError(ffi.string(cfg.error).decode(errors="replace"))
    return {
        ffi.string(cfg.entries[i].uuid).decode(): int(cfg.entries[i].limit)
        for i in range(cfg.nentries)
    }
