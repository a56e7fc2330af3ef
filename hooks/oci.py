"""The OCI state on the hook's stdin and the bundle's config.json, read and validated."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from cgpu.core.containers import validate_key
from cgpu.core.layout import CRI_LABEL_ANNOTATIONS
from cgpu.hooks.errors import RequestError

MAX_STATE_BYTES = 1 << 20
MAX_CONFIG_BYTES = 16 << 20

_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


@dataclass(frozen=True)
class State:
    """The OCI state of a container, as the runtime hands it to a hook."""

    id: str
    status: str
    pid: int
    bundle: str
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Spec:
    """What the hook needs from config.json: the rootfs, the process env, the annotations."""

    rootfs: str
    env: dict[str, str]
    annotations: dict[str, str]


def _object(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise RequestError(f"{what} is not a JSON object")
    return data


def _string_map(data: Any, what: str) -> dict[str, str]:
    items = _object(data if data is not None else {}, what)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in items.items()):
        raise RequestError(f"{what} must map strings to strings")
    return items


def read_state(stream: IO[bytes]) -> State:
    """Parse and validate the state JSON the runtime writes to the hook's stdin."""
    raw = stream.read(MAX_STATE_BYTES + 1)
    if len(raw) > MAX_STATE_BYTES:
        raise RequestError("the OCI state on stdin is too large")
    try:
        data = _object(json.loads(raw), "the OCI state on stdin")
    except ValueError as exc:
        raise RequestError(f"the OCI state on stdin is not JSON: {exc}") from None
    cid = data.get("id")
    if not isinstance(cid, str):
        raise RequestError("the OCI state has no container id")
    try:
        validate_key(cid)
    except ValueError:
        raise RequestError(f"container id {cid[:80]!r} is not [A-Za-z0-9_.-]{{1,128}}") from None
    pid = data.get("pid", 0)
    if not isinstance(pid, int) or isinstance(pid, bool) or pid < 0:
        raise RequestError(f"the OCI state has an invalid pid {pid!r}")
    bundle = data.get("bundle", "")
    if not isinstance(bundle, str) or "\0" in bundle:
        raise RequestError("the OCI state has an invalid bundle path")
    status = data.get("status", "")
    annotations = _string_map(data.get("annotations"), "the state's annotations")
    return State(cid, status if isinstance(status, str) else "", pid, bundle, annotations)


def parse_env(entries: Any) -> dict[str, str]:
    """process.env as a dict; the first of duplicate names wins, as getenv(3) sees it."""
    if entries is None:
        return {}
    if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
        raise RequestError("config.json process.env must be a list of strings")
    env: dict[str, str] = {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        if sep and name not in env:
            env[name] = value
    return env


def read_spec(bundle: str) -> Spec:
    """Read the bundle's config.json: the rootfs path (made absolute), env and annotations."""
    if not os.path.isabs(bundle):
        raise RequestError(f"the bundle path {bundle!r} is not absolute")
    path = Path(bundle) / "config.json"
    with open(path, "rb") as handle:
        raw = handle.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise RequestError(f"{path} is too large")
    try:
        config = _object(json.loads(raw), str(path))
    except ValueError as exc:
        raise RequestError(f"{path} is not JSON: {exc}") from None
    root = _object(config.get("root"), f"{path}: root")
    rootfs = root.get("path")
    if not isinstance(rootfs, str) or not rootfs or "\0" in rootfs:
        raise RequestError(f"{path}: root.path is missing")
    process = _object(config.get("process") or {}, f"{path}: process")
    return Spec(
        rootfs=os.path.normpath(os.path.join(bundle, rootfs)),
        env=parse_env(process.get("env")),
        annotations=_string_map(config.get("annotations"), f"{path}: annotations"),
    )


def labels(annotations: dict[str, str]) -> dict[str, str]:
    """namespace/pod/container from the CRI annotations; a malformed value is a RequestError."""
    found: dict[str, str] = {}
    for label, keys in CRI_LABEL_ANNOTATIONS.items():
        for key in keys:
            value = annotations.get(key)
            if value is None:
                continue
            if not _LABEL_RE.match(value):
                raise RequestError(f"annotation {key}: invalid value {value[:80]!r}")
            found[label] = value
            break
    return found
