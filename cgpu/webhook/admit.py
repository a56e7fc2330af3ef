"""One admission request, start to end: decode, scope, translate, make the templates, patch.

`Admitter.handle(body)` returns the HTTP status and the AdmissionReview to answer. It never
raises: a pod that cannot be translated is denied with the reason (`--on-error deny`) or
admitted unchanged with a warning (`--on-error pass`); a body that is not an AdmissionReview
is a 400 with a message; anything unexpected is answered the same way, and logged.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from cgpu.core.kube import KubeError
from cgpu.webhook import review
from cgpu.webhook.config import WebhookConfig
from cgpu.webhook.metrics import Metrics
from cgpu.webhook.patch import build_patch
from cgpu.webhook.podread import PodReadError
from cgpu.webhook.templates import TemplateStore
from cgpu.webhook.translate import plan_pod

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class Admitter:
    """Answers AdmissionReviews; safe to call from several server threads."""

    def __init__(self, config: WebhookConfig, store: TemplateStore, metrics: Metrics) -> None:
        self.config = config
        self.store = store
        self.metrics = metrics

    def handle(self, body: bytes) -> tuple[int, Obj | str]:
        """(HTTP status, the answer): an AdmissionReview, or a message for a 400."""
        start = time.perf_counter()
        try:
            return self._handle(body)
        finally:
            self.metrics.latency.observe(time.perf_counter() - start)

    def _handle(self, body: bytes) -> tuple[int, Obj | str]:
        try:
            request = review.decode(body)
        except review.ReviewError as err:
            self.metrics.requests.labels("malformed").inc()
            _log("malformed", uid=err.uid, reason=str(err))
            if err.uid is None:
                return 400, str(err)
            return 200, review.deny(err.uid, str(err), api_version=err.api_version)
        if not request.is_pod or request.operation != "CREATE":
            self.metrics.requests.labels("unchanged").inc()
            return 200, review.allow(request.uid)
        labels = (request.pod.get("metadata") or {}).get("labels") or {}
        if not self.config.in_scope(request.namespace, labels if isinstance(labels, dict) else {}):
            self.metrics.requests.labels("unchanged").inc()
            return 200, review.allow(request.uid)
        try:
            return 200, self._translate(request)
        except (PodReadError, KubeError) as err:
            return 200, self._refuse(request, str(err), isinstance(err, KubeError))
        except Exception as err:  # never let one pod take the server down; say what happened
            log.exception("pod %s/%s: unexpected error", request.namespace, request.name)
            return 200, self._refuse(request, f"internal error: {err!r}", True)

    def _translate(self, request: review.Request) -> Obj:
        plan = plan_pod(request.pod, self.config.unit_mib)
        if plan is None:
            self.metrics.requests.labels("unchanged").inc()
            return review.allow(request.uid)
        names = {}
        for claim, shape in plan.claims.items():
            name, created = self.store.ensure(request.namespace, shape, request.dry_run)
            names[claim] = name
            if created:
                self.metrics.templates.inc()
                _log("template-created", namespace=request.namespace, template=name)
        patch = build_patch(request.pod, plan, names)
        self.metrics.requests.labels("rewritten").inc()
        self.metrics.rewrites.inc()
        _log(
            "rewritten",
            uid=request.uid,
            namespace=request.namespace,
            pod=request.name or (request.pod.get("metadata") or {}).get("generateName", ""),
            claims={c: names[c] for c in plan.claims},
            dry_run=request.dry_run,
        )
        return review.allow(request.uid, patch)

    def _refuse(self, request: review.Request, reason: str, internal: bool) -> Obj:
        pod = f"{request.namespace}/{request.name or '(generated name)'}"
        message = f"cgpu webhook cannot translate pod {pod}: {reason}"
        action = "denied" if self.config.on_error == "deny" else "passed"
        self.metrics.requests.labels(action).inc()
        self.metrics.refusals.labels(action).inc()
        _log(action, uid=request.uid, namespace=request.namespace, pod=request.name, reason=reason)
        if action == "denied":
            return review.deny(request.uid, message, code=500 if internal else 400)
        return review.allow(request.uid, warnings=[f"{message}; admitted unchanged"])


def _log(event: str, **fields: Any) -> None:
    """One structured (JSON) log line per decision."""
    log.info(json.dumps({"event": event, **fields}, sort_keys=True, default=str))
