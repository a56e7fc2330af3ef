"""The per-container config file (`cgpu.conf`): slices per device UUID."""

from __future__ import annotations

import os
from pathlib import Path

from cgpu.core.files import atomic_write
from cgpu.core.layout import CONFIG_NAME, UUID_RE
from cgpu.core.native import load

MAX_DEVICES = 16


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


def render_config(limits: dict[str, int]) -> str:
    """The text of a config file for {uuid: bytes}."""
    if not limits or len(limits) > MAX_DEVICES:
        raise ConfigError(f"a config needs 1 to {MAX_DEVICES} devices, got {len(limits)}")
    lines = ["# cgpu container config", "version 1"]
    for uuid, limit in limits.items():
        if limit <= 0:
            raise ConfigError(f"invalid slice {limit} for {uuid}")
        lines.append(f"device {validate_uuid(uuid)} {int(limit)}")
    return "\n".join(lines) + "\n"


def write_config(directory: str | os.PathLike[str], limits: dict[str, int]) -> Path:
    """Atomically write `cgpu.conf` into `directory`; returns its path."""
    return atomic_write(Path(directory) / CONFIG_NAME, render_config(limits))


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
