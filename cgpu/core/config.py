"""The per-container config file (`cgpu.conf`): slices per device UUID, compute limits and
context costs.

A `compute <uuid> <percent> [fixed|share] [high|normal|low]` line gives a device listed above it
a compute limit (percent of the GPU's time, 1-100; policy `fixed` by default) and the priority of
its turns (`normal` by default; a priority needs the policy before it). A `context <uuid>
<bytes>` line gives what one CUDA context takes on that device, measured on the host (0 to
1 GiB): the shim charges it to each process's first context there instead of measuring it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from cgpu.core.files import atomic_write
from cgpu.core.layout import (
    CONF_COMPUTE,
    CONF_CONTEXT,
    CONF_DEVICE,
    CONF_VERSION,
    CONFIG_NAME,
    POLICY_FIXED,
    POLICY_SHARE,
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    UUID_RE,
)
from cgpu.core.native import load

MAX_DEVICES = 16
MAX_COMPUTE_PERCENT = 100
MAX_CONTEXT_BYTES = 1 << 30  # CGPU_CONFIG_MAX_CONTEXT
POLICIES = (POLICY_FIXED, POLICY_SHARE)  # CGPU_COMPUTE_FIXED = 1, CGPU_COMPUTE_SHARE = 2
# CGPU_COMPUTE_HIGH = 1, CGPU_COMPUTE_NORMAL = 2, CGPU_COMPUTE_LOW = 3 (0: the default, normal)
PRIORITIES = (PRIORITY_HIGH, PRIORITY_NORMAL, PRIORITY_LOW)
ComputeShare = int | tuple[int, str] | tuple[int, str, str]  # percent[, policy[, priority]]


class ComputeLine(NamedTuple):
    """One `compute` line: percent of the GPU's time, policy and priority."""

    percent: int
    policy: str
    priority: str = PRIORITY_NORMAL


class ConfigError(ValueError):
    """A malformed config file or size."""


def parse_size(text: str) -> int:
    """Parse bytes or a size with a KiB/MiB/GiB/TiB or K/M/G/T suffix (powers of 1024)."""
    ffi, lib = load()
    out = ffi.new("unsigned long long *")
    if lib.cgpu_parse_size(text.encode(), out) != 0:
        raise ConfigError(f"malformed size {text!r}: expected bytes or a number with KiB/MiB/GiB")
    return int(out[0])


def validate_uuid(uuid: str) -> str:
    """Return `uuid` if it is safe to write into a config file, else raise ConfigError."""
    if not UUID_RE.match(uuid):
        raise ConfigError(f"invalid device UUID {uuid!r}")
    return uuid


def render_config(
    limits: Mapping[str, int],
    compute: Mapping[str, ComputeShare] | None = None,
    contexts: Mapping[str, int] | None = None,
) -> str:
    """The text of a config file for {uuid: bytes}, compute shares {uuid: percent},
    {uuid: (percent, policy)} or {uuid: (percent, policy, priority)}, and context costs
    {uuid: bytes}.

    Each device's lines come in the order `device`, `compute`, `context`; a compute line
    without a policy takes the shim's default (`fixed`). Context costs of devices without a
    slice are left out (a node-wide measurement names GPUs the container does not get).
    """
    if not limits or len(limits) > MAX_DEVICES:
        raise ConfigError(f"a config needs 1 to {MAX_DEVICES} devices, got {len(limits)}")
    lines = ["# cgpu container config", f"{CONF_VERSION} 1"]
    for uuid, limit in limits.items():
        if limit <= 0:
            raise ConfigError(f"invalid slice {limit} for {uuid}")
        lines.append(f"{CONF_DEVICE} {validate_uuid(uuid)} {int(limit)}")
        if compute and uuid in compute:
            lines.append(_compute_line(uuid, compute[uuid]))
        if contexts and uuid in contexts:
            lines.append(_context_line(uuid, contexts[uuid]))
    unknown = set(compute or {}) - set(limits)
    if unknown:
        raise ConfigError(f"compute limits for devices without a slice: {sorted(unknown)}")
    return "\n".join(lines) + "\n"


def _compute_line(uuid: str, share: ComputeShare) -> str:
    """One `compute <uuid> <percent> [policy [priority]]` line, or a ConfigError."""
    fields = share if isinstance(share, tuple) else (share,)
    percent, words = fields[0], [str(word) for word in fields[1:]]
    if isinstance(percent, bool) or not 1 <= int(percent) <= MAX_COMPUTE_PERCENT:
        raise ConfigError(f"invalid compute share {percent!r} for {uuid}: 1 to 100 percent")
    if len(words) > 2:
        raise ConfigError(f"invalid compute share {share!r} for {uuid}: too many fields")
    if words and words[0] not in POLICIES:
        raise ConfigError(f"invalid compute policy {words[0]!r} for {uuid}: fixed or share")
    if len(words) == 2 and words[1] not in PRIORITIES:
        raise ConfigError(f"invalid compute priority {words[1]!r} for {uuid}: high, normal or low")
    return " ".join([CONF_COMPUTE, uuid, str(int(percent)), *words])


def _context_line(uuid: str, size: int) -> str:
    """One `context <uuid> <bytes>` line, or a ConfigError."""
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_CONTEXT_BYTES:
        raise ConfigError(f"invalid context cost {size!r} for {uuid}: 0 to 1 GiB in bytes")
    return f"{CONF_CONTEXT} {uuid} {size}"


def write_config(
    directory: str | os.PathLike[str],
    limits: Mapping[str, int],
    compute: Mapping[str, ComputeShare] | None = None,
    contexts: Mapping[str, int] | None = None,
) -> Path:
    """Atomically write `cgpu.conf` into `directory`; returns its path."""
    text = render_config(limits, compute, contexts)
    return atomic_write(Path(directory) / CONFIG_NAME, text)


def _load(path: str | os.PathLike[str]) -> tuple[Any, Any]:
    ffi, lib = load()
    cfg = ffi.new("struct cgpu_config *")
    if lib.cgpu_config_load(str(path).encode(), cfg) != 0:
        raise ConfigError(ffi.string(cfg.error).decode(errors="replace"))
    return ffi, cfg


def load_config(path: str | os.PathLike[str]) -> dict[str, int]:
    """Parse a config file with the shim's own parser; returns {uuid: bytes}."""
    ffi, cfg = _load(path)
    return {
        ffi.string(cfg.entries[i].uuid).decode(): int(cfg.entries[i].limit)
        for i in range(cfg.nentries)
    }


def load_compute_lines(path: str | os.PathLike[str]) -> dict[str, ComputeLine]:
    """The compute lines of a config file (shim's parser): {uuid: ComputeLine}."""
    ffi, cfg = _load(path)
    out = {}
    for i in range(cfg.nentries):
        entry = cfg.entries[i]
        if entry.compute:
            policy = POLICIES[1] if entry.compute_policy == 2 else POLICIES[0]
            priority = PRIORITIES[entry.compute_priority - 1] if entry.compute_priority else None
            line = ComputeLine(int(entry.compute), policy, priority or PRIORITY_NORMAL)
            out[ffi.string(entry.uuid).decode()] = line
    return out


def load_compute(path: str | os.PathLike[str]) -> dict[str, tuple[int, str]]:
    """The compute lines of a config file (shim's parser): {uuid: (percent, policy)}."""
    return {uuid: (line.percent, line.policy) for uuid, line in load_compute_lines(path).items()}


def load_contexts(path: str | os.PathLike[str]) -> dict[str, int]:
    """The context lines of a config file (shim's parser): {uuid: bytes}."""
    ffi, cfg = _load(path)
    return {
        ffi.string(cfg.entries[i].uuid).decode(): int(cfg.entries[i].context)
        for i in range(cfg.nentries)
        if cfg.entries[i].has_context
    }
