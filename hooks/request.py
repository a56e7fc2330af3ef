"""What a container asks for, read by the shim's own parser (`cgpu.core.request.parse_env`).

The hook does not interpret the limit variables itself: `parse_env` calls the C function the
shim runs on its own environment, so a container the hook accepts is one the shim accepts, with
the same slices. The rules (CGPU_DISABLE, precedence, what is malformed) are documented there
and next to `struct cgpu_request` in cgpu_api.h.
"""

from __future__ import annotations

from collections.abc import Mapping

from cgpu.core.request import Disabled, Fixed, LimitError, NoLimit, Request, Share, parse_env
from cgpu.hooks.errors import RequestError

__all__ = ["Fixed", "Request", "Share", "parse_request"]


def parse_request(env: Mapping[str, str]) -> Fixed | Share | None:
    """The container's request, or None when it sets no limit variable or sets CGPU_DISABLE.

    A malformed limit variable is a RequestError that names it (`.variable`), even when a
    higher source would override it: the shim refuses such a container too.
    """
    try:
        request: Request = parse_env(env)
    except LimitError as exc:
        raise RequestError(str(exc), exc.variable) from None
    if isinstance(request, Disabled | NoLimit):
        return None
    return request
