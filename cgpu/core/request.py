"""What a container asks for, read from the contract's limit variables by the shim's own parser.

One parser for every injector: `parse_env` calls `cgpu_request_from_env`, the C function the shim
runs on its own environment, so the shim, the OCI hook and the device plugin cannot disagree.
The rules (documented next to `struct cgpu_request` in cgpu_api.h):

- `CGPU_DISABLE` set to `true`, `1` or `yes` (any case) turns everything off and wins.
- Every limit variable that is present must be well-formed; a malformed one is a LimitError
  naming it, even when a higher source overrides it.
- Per device ordinal: `CGPU_MEM_LIMIT_<i>` (i in 0-15), else `CGPU_MEM_LIMIT`, else the first
  share pair present (`ALIYUN_COM_GPU_MEM_CONTAINER`/`_DEV`, then `VOLCANO_GPU_ALLOCATED`/
  `VOLCANO_GPU_MEMORY_TOTAL`), slice = floor(total x units / of), else no slice.
- Compute (`parse_compute_env`): `CGPU_COMPUTE_LIMIT_<i>` over `CGPU_COMPUTE_LIMIT`, a whole
  percent 1-100 of one GPU's time (an optional `%`); `CGPU_COMPUTE_POLICY` is `fixed` (the
  default) or `share`; `CGPU_COMPUTE_PRIORITY` is `high`, `normal` (the default) or `low`.
  Malformed ones are a LimitError like the memory variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cgpu.core.layout import ENV_GPU_MEM_PREFIX, ENV_PREFIX, ENV_VOLCANO_PREFIX
from cgpu.core.native import load

MAX_ORDINALS = 16
_KIND_NONE, _KIND_FIXED, _KIND_SHARE, _KIND_DISABLED = 0, 1, 2, 3


class LimitError(ValueError):
    """A malformed limit variable; `.variable` names it."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(message)
        self.variable = variable


@dataclass(frozen=True)
class Disabled:
    """CGPU_DISABLE: the shim stays out of the way."""


@dataclass(frozen=True)
class NoLimit:
    """No limit variable is set: no slice anywhere."""


@dataclass(frozen=True)
class Share:
    """A share of each device: floor(total x units / of)."""

    units: int
    of: int


@dataclass(frozen=True)
class Fixed:
    """Slices in bytes: a default, overrides by device ordinal, and the share (if any) that
    applies to an ordinal with neither."""

    default: int | None
    by_ordinal: Mapping[int, int] = field(default_factory=dict)
    share: Share | None = None


Request = Disabled | NoLimit | Fixed | Share


@dataclass(frozen=True)
class Compute:
    """A compute limit: percent of one GPU's time per device ordinal, the policy and the
    priority of its turns."""

    default: int | None
    by_ordinal: Mapping[int, int] = field(default_factory=dict)
    policy: str = "fixed"
    priority: str = "normal"

    def percent(self, ordinal: int) -> int | None:
        """The limit of device `ordinal`, or None when it has none."""
        return self.by_ordinal.get(ordinal, self.default)


def _environment(ffi: Any, env: Mapping[str, str]) -> tuple[Any, list[Any]]:
    """A NULL-terminated `NAME=value` array for C, and the buffers that keep it alive."""
    buffers = []
    for name, value in env.items():
        if "\0" in name or "\0" in value or "=" in name:
            if name.startswith((ENV_PREFIX, ENV_GPU_MEM_PREFIX, ENV_VOLCANO_PREFIX)):
                raise LimitError(name, f"{name[:60]!r} holds a NUL or '=' character")
            continue
        buffers.append(ffi.new("char[]", f"{name}={value}".encode("utf-8", "surrogateescape")))
    array = ffi.new("const char *[]", [*buffers, ffi.NULL])
    return array, buffers


def parse_env(env: Mapping[str, str]) -> Request:
    """The request that the limit variables of `env` make; raises LimitError when malformed."""
    req = _request(env)
    share = Share(int(req.units), int(req.of)) if req.of else None
    if req.kind == _KIND_DISABLED:
        return Disabled()
    if req.kind == _KIND_SHARE and share is not None:
        return share
    if req.kind == _KIND_FIXED:
        by_ordinal = {
            i: int(req.fixed_by_ordinal[i]) for i in range(MAX_ORDINALS) if req.fixed_by_ordinal[i]
        }
        return Fixed(int(req.fixed_default) or None, by_ordinal, share)
    return NoLimit()


def _request(env: Mapping[str, str]) -> Any:
    """The C struct the shim's parser fills from `env`; raises LimitError when malformed."""
    ffi, lib = load()
    envp, _keep = _environment(ffi, env)
    req = ffi.new("struct cgpu_request *")
    if lib.cgpu_request_from_env(envp, req) != 0:
        raise LimitError(
            ffi.string(req.variable).decode(errors="replace"),
            ffi.string(req.error).decode(errors="replace"),
        )
    return req


def parse_compute_env(env: Mapping[str, str]) -> Compute | None:
    """The compute limit of `env` (None: none, or CGPU_DISABLE); raises LimitError when any
    limit variable is malformed."""
    req = _request(env)
    by_ordinal = {
        i: int(req.compute_by_ordinal[i]) for i in range(MAX_ORDINALS) if req.compute_by_ordinal[i]
    }
    if req.kind == _KIND_DISABLED or not (req.compute_default or by_ordinal):
        return None
    policy = "share" if req.compute_policy == 2 else "fixed"
    priority = {1: "high", 3: "low"}.get(req.compute_priority, "normal")
    return Compute(int(req.compute_default) or None, by_ordinal, policy, priority)


def _to_c(ffi: Any, request: Request) -> Any:
    """The C struct of `request`, for cgpu_request_slice."""
    req = ffi.new("struct cgpu_request *")
    share = request if isinstance(request, Share) else None
    if isinstance(request, Fixed):
        req.kind = _KIND_FIXED
        req.fixed_default = request.default or 0
        for ordinal, size in request.by_ordinal.items():
            req.fixed_by_ordinal[ordinal] = size
        share = request.share
    elif isinstance(request, Share):
        req.kind = _KIND_SHARE
    else:
        req.kind = _KIND_DISABLED if isinstance(request, Disabled) else _KIND_NONE
    if share is not None:
        req.units, req.of = share.units, share.of
    return req


def slice_for(request: Request, ordinal: int, total: int) -> int | None:
    """The slice in bytes of device `ordinal` with `total` bytes, or None when it has none
    (computed by the shim's own cgpu_request_slice)."""
    if not 0 <= ordinal < 1 << 32 or not 0 <= total < 1 << 64:
        raise ValueError(f"invalid device ordinal {ordinal} or total {total}")
    ffi, lib = load()
    out = ffi.new("unsigned long long *")
    if lib.cgpu_request_slice(_to_c(ffi, request), ordinal, total, out) != 0:
        return None
    return int(out[0])
