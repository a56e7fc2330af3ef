"""The JSONPatch (RFC 6902) that rewrites a pod by its plan.

- each translated container loses the extended resources it asked for (limits and requests)
  and names its claim in `resources.claims`;
- `spec.resourceClaims` gains one entry per claim, from its template;
- the annotation `cgpu.io/gpushare-request` records what each container asked for.
"""

from __future__ import annotations

import json
from typing import Any

from cgpu.core.layout import WEBHOOK_ANNOTATION
from cgpu.webhook.translate import Plan

Op = dict[str, Any]


def pointer(*parts: object) -> str:
    """A JSON pointer to `parts` ('~' and '/' escaped, as in `aliyun.com~1gpu-mem`)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def build_patch(pod: dict[str, Any], plan: Plan, templates: dict[str, str]) -> list[Op]:
    """The operations; `templates` maps each of the plan's claims to its template's name."""
    spec = pod.get("spec") or {}
    ops: list[Op] = []
    for use in plan.uses:
        ask = use.ask
        base = ("spec", ask.kind, ask.index, "resources")
        for section, resource in ask.found:
            ops.append({"op": "remove", "path": pointer(*base, section, resource)})
        container = spec[ask.kind][ask.index]
        resources = container.get("resources")
        entry = {"name": use.claim}
        if not isinstance(resources, dict):
            ops.append({"op": "add", "path": pointer(*base), "value": {"claims": [entry]}})
        elif resources.get("claims") is None:
            ops.append({"op": "add", "path": pointer(*base, "claims"), "value": [entry]})
        else:
            ops.append({"op": "add", "path": pointer(*base, "claims", "-"), "value": entry})
    entries = [{"name": n, "resourceClaimTemplateName": templates[n]} for n in plan.claims]
    if spec.get("resourceClaims") is None:
        ops.append({"op": "add", "path": pointer("spec", "resourceClaims"), "value": entries})
    else:
        ops += [
            {"op": "add", "path": pointer("spec", "resourceClaims", "-"), "value": e}
            for e in entries
        ]
    ops += _annotation(pod, plan)
    return ops


def _annotation(pod: dict[str, Any], plan: Plan) -> list[Op]:
    """Record what the containers asked for (merged with an earlier record on reinvocation)."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations")
    record: dict[str, Any] = {}
    if isinstance(annotations, dict) and WEBHOOK_ANNOTATION in annotations:
        try:
            earlier = json.loads(annotations[WEBHOOK_ANNOTATION])
            record = earlier if isinstance(earlier, dict) else {}
        except ValueError:
            record = {}
    record.update(plan.requested())
    value = json.dumps(record, sort_keys=True, separators=(",", ":"))
    if not isinstance(annotations, dict):
        return [
            {"op": "add", "path": "/metadata/annotations", "value": {WEBHOOK_ANNOTATION: value}}
        ]
    return [
        {
            "op": "add",
            "path": pointer("metadata", "annotations", WEBHOOK_ANNOTATION),
            "value": value,
        }
    ]


def apply_patch(doc: Any, ops: list[Op]) -> Any:
    """Apply `ops` to a copy of `doc` (the subset of RFC 6902 that build_patch writes: add and
    remove), as the API server would; for tests and the command's --dry-run."""
    result = json.loads(json.dumps(doc))
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = result
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if op["op"] == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif op["op"] == "add":
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), op["value"])
            else:
                parent[last] = op["value"]
        else:
            raise ValueError(f"unsupported JSONPatch op {op['op']!r}")
    return result
