"""Kubernetes resource quantities ("4Gi", "512Mi", "30", "1e3", "1.5k") as exact integers.

The one parser of the quantity grammar (k8s.io/apimachinery's `resource.ParseQuantity`):

    <quantity>  ::= <sign>? <number> <suffix>
    <number>    ::= digits | digits "." | digits "." digits | "." digits
    <suffix>    ::= "" | Ki | Mi | Gi | Ti | Pi | Ei | n | u | m | k | M | G | T | P | E
                  | ("e" | "E") <sign>? digits

The arithmetic is exact (integers, no floating point, no rounding), and a value is refused
before it is built when it could not fit in an int64, so "1e999999999" costs nothing.
`cgpu.core.podcontract` adds the rules of an extended resource (not negative) on top.
"""

from __future__ import annotations

import math
import re

INT64_MAX = (1 << 63) - 1
MALFORMED = "is not a Kubernetes quantity"
_MAX_DIGITS = 100  # an int64 times 2**60 with 60 decimals still fits in fewer

_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:(?P<suffix>[KMGTPE]i|[numkMGTPE])|[eE](?P<exp>[+-]?[0-9]+))?$"
)
# suffix -> (power of 2, power of 10)
_SUFFIX = {
    "": (0, 0),
    "Ki": (10, 0),
    "Mi": (20, 0),
    "Gi": (30, 0),
    "Ti": (40, 0),
    "Pi": (50, 0),
    "Ei": (60, 0),
    "n": (0, -9),
    "u": (0, -6),
    "m": (0, -3),
    "k": (0, 3),
    "M": (0, 6),
    "G": (0, 9),
    "T": (0, 12),
    "P": (0, 15),
    "E": (0, 18),
}
_BINARY = (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))


class QuantityError(ValueError):
    """Not a quantity, not a whole number, or too large for an int64; `reason` says which
    ("is not a whole number"), for a caller that names the field itself."""

    def __init__(self, raw: object, reason: str) -> None:
        malformed = reason.startswith(MALFORMED)
        super().__init__(
            f"malformed quantity {raw!r}" if malformed else f"quantity {raw!r} {reason}"
        )
        self.reason = reason


def _huge(exponent: str) -> int:
    """An exponent of 20 digits or more: its sign times a number past any use."""
    return -(10**20) if exponent.startswith("-") else 10**20


def _text(raw: object) -> str:
    """The quantity's text: a JSON string (spaces trimmed, as the API server's decoder does)
    or a JSON number."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise QuantityError(raw, f"{MALFORMED} (not a string or a number)")
    if isinstance(raw, float) and not math.isfinite(raw):
        raise QuantityError(raw, MALFORMED)
    return str(raw).strip()


def parse_quantity(raw: object) -> int:
    """The whole number a quantity stands for (negative ones included); QuantityError for
    anything that is not a quantity, not whole ("0.5", "1500m") or beyond an int64."""
    text = _text(raw)
    match = _QUANTITY.match(text)
    if not match or not (match["int"] or match["frac"]):
        raise QuantityError(raw, MALFORMED)
    frac = match["frac"] or ""
    binary, decimal = _SUFFIX[match["suffix"] or ""]
    if match["exp"] is not None:
        decimal = int(match["exp"]) if len(match["exp"]) < 20 else _huge(match["exp"])
    digits = (match["int"] or "") + frac
    decimal -= len(frac)
    significant = digits.rstrip("0")
    decimal += len(digits) - len(significant)
    significant = significant.lstrip("0")
    if not significant:
        return 0
    if len(significant) > _MAX_DIGITS:
        raise QuantityError(raw, f"has more than {_MAX_DIGITS} significant digits")
    # An upper bound on the decimal digits of mantissa * 2**binary * 10**decimal.
    magnitude = len(significant) + decimal + binary * 302 // 1000 + 1
    if magnitude > 20:
        raise QuantityError(raw, f"is too large (beyond {INT64_MAX})")
    if magnitude <= 0:
        raise QuantityError(raw, "is not a whole number")
    value = int(significant) << binary
    if decimal < 0:
        value, rest = divmod(value, 10**-decimal)
        if rest:
            raise QuantityError(raw, "is not a whole number")
    else:
        value *= 10**decimal
    if value > INT64_MAX:
        raise QuantityError(raw, f"is too large (beyond {INT64_MAX})")
    return -value if match["sign"] == "-" else value


def format_bytes(value: int) -> str:
    """A byte count in the largest binary suffix that holds it exactly ("4Gi"), as the API
    server writes it."""
    for suffix, shift in _BINARY:
        if value and value % (1 << shift) == 0:
            return f"{value >> shift}{suffix}"
    return str(value)
