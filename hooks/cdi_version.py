"""The lowest CDI spec version that expresses a spec, by the rules of the CDI project's specs-go.

A runtime's CDI library refuses a `cdiVersion` it does not know (podman 4.3, Debian bookworm's,
knows up to 0.5.0), and a newer library refuses a version too low for the fields the spec uses.
So `cgpu cdi` writes the lowest version that fits, as NVIDIA's CDI tooling does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# Every released spec version, oldest first; 0.3.0 is the earliest that libraries accept.
VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
EARLIEST = "0.3.0"


class VersionError(ValueError):
    """An unknown version, or one too low for what the spec uses."""


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _edits(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield spec.get("containerEdits") or {}
    for device in spec.get("devices") or []:
        yield device.get("containerEdits") or {}


def _needs(spec: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(version, why) for every feature the spec uses that a version introduced."""
    edits = list(_edits(spec))
    for edit in edits:
        if any(m.get("type") for m in edit.get("mounts") or []):
            yield "0.4.0", "a mount with a type"
        if any(n.get("hostPath") for n in edit.get("deviceNodes") or []):
            yield "0.5.0", "a device node with a hostPath"
        rdt = edit.get("intelRdt")
        if rdt is not None:
            yield "0.7.0", "intelRdt"
            if rdt.get("schemata") or rdt.get("enableMonitoring"):
                yield "1.1.0", "intelRdt schemata or enableMonitoring"
        if edit.get("additionalGids"):
            yield "0.7.0", "additionalGids"
        if edit.get("netDevices"):
            yield "1.1.0", "netDevices"
    for device in spec.get("devices") or []:
        name = device.get("name", "")
        if name[:1].isdigit():
            yield "0.5.0", f"a device name starting with a digit ({name!r})"
        if device.get("annotations"):
            yield "0.6.0", "device annotations"
    if spec.get("annotations"):
        yield "0.6.0", "spec annotations"
    _vendor, slash, kind_class = spec.get("kind", "").partition("/")
    if slash and "." in kind_class:
        yield "0.6.0", "a dot in the kind's class"


def minimum_version(spec: dict[str, Any]) -> tuple[str, str]:
    """The lowest version for `spec`, and the feature that needs it ("" for the earliest)."""
    best, why = EARLIEST, ""
    for version, reason in _needs(spec):
        if _key(version) > _key(best):
            best, why = version, reason
    return best, why


def choose_version(spec: dict[str, Any], pinned: str | None) -> str:
    """`pinned` when it is a known version that can express `spec`, else the minimum."""
    lowest, why = minimum_version(spec)
    if pinned is None:
        return lowest
    wanted = pinned.removeprefix("v")
    if wanted not in VERSIONS:
        raise VersionError(f"unknown CDI version {pinned!r} (known: {', '.join(VERSIONS)})")
    if _key(wanted) < _key(lowest):
        raise VersionError(f"CDI version {wanted} is too low for this spec: {why} needs {lowest}")
    return wanted
