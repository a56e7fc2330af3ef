"""Prometheus metrics of the webhook, in a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)


class Metrics:
    """Requests by result, rewrites, refusals, template writes and latency."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "cgpu_webhook_requests",
            "Admission requests answered, by result (rewritten, unchanged, denied, passed, "
            "malformed)",
            ["result"],
            registry=self.registry,
        )
        self.rewrites = Counter(
            "cgpu_webhook_rewrites", "Pods rewritten into claims", registry=self.registry
        )
        self.refusals = Counter(
            "cgpu_webhook_refusals",
            "Pods that could not be translated, by what was done (denied or passed)",
            ["action"],
            registry=self.registry,
        )
        self.templates = Counter(
            "cgpu_webhook_templates_created",
            "ResourceClaimTemplates created",
            registry=self.registry,
        )
        self.latency = Histogram(
            "cgpu_webhook_request_duration_seconds",
            "Time to answer an admission request, template writes included",
            buckets=BUCKETS,
            registry=self.registry,
        )
