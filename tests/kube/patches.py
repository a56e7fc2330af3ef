"""PATCH bodies as the API server applies them: merge, strategic merge, JSON patch."""

from __future__ import annotations

import copy
from typing import Any

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
# Lists that strategic merge combines by this key instead of replacing.
MERGE_KEYS = {"containers": "name", "initContainers": "name", "conditions": "type"}


class PatchError(ValueError):
    """A patch the server refuses (HTTP 400 or 422)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """Merge patch, except that lists of named items merge by their key."""
    if isinstance(patch, list) and field in MERGE_KEYS and isinstance(target, list):
        key = MERGE_KEYS[field]
        out = [copy.deepcopy(item) for item in target]
        for item in patch:
            if not isinstance(item, dict) or key not in item:
                raise PatchError(f"strategic merge: {field} items need {key!r}")
            index = next((i for i, old in enumerate(out) if old.get(key) == item[key]), None)
            if index is None:
                out.append(copy.deepcopy(item))
            else:
                out[index] = strategic_merge_patch(out[index], item)
        return out
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = strategic_merge_patch(out.get(key), value, key)
    return out


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise PatchError(f"JSON patch path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> Any:
    for part in parts[:-1]:
        try:
            doc = doc[int(part)] if isinstance(doc, list) else doc[part]
        except (KeyError, IndexError, ValueError) as err:
            raise PatchError(f"JSON patch: no such path element {part!r}") from err
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 add, remove, replace and test."""
    if not isinstance(ops, list):
        raise PatchError("JSON patch body must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"JSON patch operation {op!r} needs op and path")
        parts = _pointer(op["path"])
        parent = _parent(doc, parts)
        last = parts[-1]
        kind = op["op"]
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op.get("value"):
                raise PatchError(f"JSON patch test failed at {op['path']}")
        elif kind == "remove":
            try:
                del parent[int(last) if isinstance(parent, list) else last]
            except (KeyError, IndexError) as err:
                raise PatchError(f"JSON patch: nothing to remove at {op['path']}") from err
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op.get("value"))
                elif kind == "add":
                    parent.insert(int(last), op.get("value"))
                else:
                    parent[int(last)] = op.get("value")
            else:
                if kind == "replace" and last not in parent:
                    raise PatchError(f"JSON patch: nothing to replace at {op['path']}")
                parent[last] = op.get("value")
        else:
            raise PatchError(f"JSON patch operation {kind!r} is not supported")
    return doc


def apply_patch(content_type: str, target: dict[str, Any], body: Any) -> dict[str, Any]:
    """The object after applying `body` of the given Content-Type."""
    kind = content_type.split(";")[0].strip()
    if kind == MERGE:
        result = merge_patch(target, body)
    elif kind == STRATEGIC:
        result = strategic_merge_patch(target, body)
    elif kind == JSON_PATCH:
        result = json_patch(target, body)
    else:
        raise PatchError(f"unsupported patch content type {content_type!r}")
    if not isinstance(result, dict):
        raise PatchError("patch did not leave an object")
    return result
