"""AdmissionReview `admission.k8s.io/v1`: the request the API server sends, the answer it reads.

`decode` checks what the webhook relies on and raises `ReviewError` with a message for what is
wrong; where the request's uid could be read, the error is answered as a denial (the API
server shows its message), else as HTTP 400.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
MAX_BODY = 3 << 20  # the API server's own request limit is 3 MiB

Obj = dict[str, Any]


class ReviewError(ValueError):
    """A review the webhook cannot read; `uid` is the request's, when it could be read."""

    def __init__(self, message: str, uid: str | None = None, api_version: str = API_VERSION):
        super().__init__(message)
        self.uid = uid
        self.api_version = api_version


@dataclass(frozen=True)
class Request:
    """The parts of an AdmissionRequest the webhook uses."""

    uid: str
    operation: str
    namespace: str
    name: str
    pod: Obj
    dry_run: bool
    is_pod: bool  # resource pods, no subresource


def decode(body: bytes) -> Request:
    """The request in an AdmissionReview body; ReviewError saying what is wrong."""
    if len(body) > MAX_BODY:
        raise ReviewError(f"request body of {len(body)} bytes is over {MAX_BODY}")
    try:
        review = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise ReviewError(f"body is not JSON: {err}") from None
    if not isinstance(review, dict):
        raise ReviewError("body is not an AdmissionReview object")
    request = review.get("request")
    uid = request.get("uid") if isinstance(request, dict) else None
    uid = uid if isinstance(uid, str) and uid else None
    version = review.get("apiVersion")
    if version != API_VERSION or review.get("kind") != KIND:
        raise ReviewError(
            f"this webhook speaks {KIND} {API_VERSION} only, got {review.get('kind')!r} "
            f"{version!r}: list only v1 in admissionReviewVersions",
            uid,
            version
            if isinstance(version, str) and version.startswith("admission.k8s.io/")
            else API_VERSION,
        )
    if not isinstance(request, dict) or uid is None:
        raise ReviewError("AdmissionReview has no request with a uid")
    resource = request.get("resource") or {}
    is_pod = (
        isinstance(resource, dict)
        and resource.get("group", "") == ""
        and resource.get("resource") == "pods"
        and not request.get("subResource")
    )
    pod = request.get("object")
    if is_pod and request.get("operation") in ("CREATE", "UPDATE") and not isinstance(pod, dict):
        raise ReviewError("request.object is not a pod object", uid)
    return Request(
        uid=uid,
        operation=str(request.get("operation", "")),
        namespace=str(
            request.get("namespace") or (pod or {}).get("metadata", {}).get("namespace") or ""
        ),
        name=str(request.get("name") or (pod or {}).get("metadata", {}).get("name") or ""),
        pod=pod if isinstance(pod, dict) else {},
        dry_run=bool(request.get("dryRun")),
        is_pod=is_pod,
    )


def allow(uid: str, patch: list[Obj] | None = None, warnings: list[str] | None = None) -> Obj:
    """An AdmissionReview that admits the request, with a JSONPatch when there is one."""
    response: Obj = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    if warnings:
        response["warnings"] = warnings
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def deny(uid: str, message: str, code: int = 400, api_version: str = API_VERSION) -> Obj:
    """An AdmissionReview that refuses the request with `message` (kubectl prints it)."""
    return {
        "apiVersion": api_version,
        "kind": KIND,
        "response": {
            "uid": uid,
            "allowed": False,
            "status": {
                "status": "Failure",
                "code": code,
                "reason": "BadRequest" if code == 400 else "InternalError",
                "message": message,
            },
        },
    }
