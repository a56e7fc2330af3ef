"""Kubernetes resource quantities ("4Gi", "512Mi", "30", "1e3") as exact integers."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[kMGTPE]|m|)$")
_SUFFIX = {
    "": 1,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
    "Ei": 1 << 60,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_BINARY = (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))


class QuantityError(ValueError):
    """Not a quantity, or not a whole number."""


def parse_quantity(text: object) -> int:
    """The whole number a quantity stands for; QuantityError for anything else."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise QuantityError(f"malformed quantity {text!r}")
    raw = str(text).strip()
    match = _QUANTITY.match(raw)
    if not match:
        raise QuantityError(f"malformed quantity {text!r}")
    number, suffix = match.groups()
    try:
        value = Decimal(number)
        if suffix[:1] in ("e", "E"):
            value = value.scaleb(int(suffix[1:]))
        elif suffix == "m":
            value = value / 1000
        else:
            value = value * _SUFFIX[suffix]
    except (InvalidOperation, ValueError):
        raise QuantityError(f"malformed quantity {text!r}") from None
    if value != value.to_integral_value():
        raise QuantityError(f"quantity {text!r} is not a whole number")
    return int(value)


def format_bytes(value: int) -> str:
    """A byte count in the largest binary suffix that holds it exactly ("4Gi"), as the API
    server writes it."""
    for suffix, shift in _BINARY:
        if value and value % (1 << shift) == 0:
            return f"{value >> shift}{suffix}"
    return str(value)
