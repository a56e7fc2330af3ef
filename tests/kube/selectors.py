"""Field and label selectors as the API server parses them (the subset tests need)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]
Matcher = Callable[[Obj], bool]

FIELDS: dict[str, Callable[[Obj], str]] = {
    "metadata.name": lambda o: o.get("metadata", {}).get("name", ""),
    "metadata.namespace": lambda o: o.get("metadata", {}).get("namespace", ""),
    "spec.nodeName": lambda o: (o.get("spec") or {}).get("nodeName") or "",
    "status.phase": lambda o: (o.get("status") or {}).get("phase") or "",
    "spec.driver": lambda o: (o.get("spec") or {}).get("driver") or "",
    "spec.pool.name": lambda o: ((o.get("spec") or {}).get("pool") or {}).get("name") or "",
}


class SelectorError(ValueError):
    """A selector the server refuses (HTTP 400)."""


def _split(selector: str) -> list[str]:
    """Comma-separated terms, keeping commas inside `in (a,b)` sets."""
    terms, depth, current = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += ch
    terms.append(current)
    return [t.strip() for t in terms if t.strip()]


def field_matcher(selector: str) -> Matcher:
    """A predicate for `fieldSelector` (`=`, `==`, `!=` on the supported fields)."""
    checks: list[tuple[Callable[[Obj], str], str, bool]] = []
    for term in _split(selector):
        match = re.fullmatch(r"([\w.]+)\s*(==|=|!=)\s*(.*)", term)
        if not match:
            raise SelectorError(f"invalid field selector term {term!r}")
        key, op, value = match.groups()
        if key not in FIELDS:
            raise SelectorError(f'field label not supported: "{key}"')
        checks.append((FIELDS[key], value, op == "!="))
    return lambda obj: all((get(obj) == value) != negate for get, value, negate in checks)


def label_matcher(selector: str) -> Matcher:
    """A predicate for `labelSelector` (`=`, `==`, `!=`, `in`, `notin`, exists, `!key`)."""
    checks: list[Matcher] = []
    for term in _split(selector):
        m_set = re.fullmatch(r"([\w./-]+)\s+(in|notin)\s+\((.*)\)", term)
        m_eq = re.fullmatch(r"([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)", term)
        m_has = re.fullmatch(r"(!?)([\w./-]+)", term)
        if m_set:
            key, op, raw = m_set.groups()
            values = {v.strip() for v in raw.split(",")}
            checks.append(_set_check(key, values, op == "notin"))
        elif m_eq:
            key, op, value = m_eq.groups()
            checks.append(_eq_check(key, value, op == "!="))
        elif m_has:
            neg, key = m_has.groups()
            checks.append(_has_check(key, bool(neg)))
        else:
            raise SelectorError(f"invalid label selector term {term!r}")
    return lambda obj: all(check(obj) for check in checks)


def _labels(obj: Obj) -> dict[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


def _set_check(key: str, values: set[str], negate: bool) -> Matcher:
    def check(obj: Obj) -> bool:
        labels = _labels(obj)
        if negate:
            return labels.get(key) not in values
        return key in labels and labels[key] in values

    return check


def _eq_check(key: str, value: str, negate: bool) -> Matcher:
    def check(obj: Obj) -> bool:
        labels = _labels(obj)
        if negate:
            return labels.get(key) != value
        return labels.get(key) == value

    return check


def _has_check(key: str, negate: bool) -> Matcher:
    return lambda obj: (key in _labels(obj)) != negate
