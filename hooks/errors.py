"""The hook's two kinds of failure, and how either becomes one line on stderr."""

from __future__ import annotations


class RequestError(ValueError):
    """The container asked for something malformed; the message names the variable.

    `variable` is the limit variable at fault when the limit parser refused it, else None.
    """

    def __init__(self, message: str, variable: str | None = None) -> None:
        super().__init__(message)
        self.variable = variable


def one_line(exc: BaseException) -> str:
    """A single-line description of `exc` (OSError without the "[Errno n]" prefix)."""
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror + (f": {exc.filename}" if exc.filename else "")
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())
