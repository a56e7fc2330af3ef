"""Prometheus metrics of the extender, in a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    """Request latency per verb, binds, bind failures by reason, filter outcomes, cache size."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "cgpu_extender_request_duration_seconds",
            "Time to answer a scheduler-extender request, by verb",
            ["verb"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.binds = Counter(
            "cgpu_extender_binds", "Pods bound by the extender", registry=self.registry
        )
        self.bind_failures = Counter(
            "cgpu_extender_bind_failures",
            "Binds that failed, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.filtered = Counter(
            "cgpu_extender_filter_nodes",
            "Nodes judged by filter, by result (fit, failed, unresolvable)",
            ["result"],
            registry=self.registry,
        )
        self.bad_requests = Counter(
            "cgpu_extender_bad_requests",
            "Requests refused as malformed, by verb",
            ["verb"],
            registry=self.registry,
        )
        self.lists = Counter(
            "cgpu_extender_lists",
            "Full lists of the API server (start, 410 Gone, watch errors), by resource",
            ["resource"],
            registry=self.registry,
        )
        self.nodes = Gauge("cgpu_extender_nodes", "GPU nodes in the cache", registry=self.registry)
        self.pods = Gauge(
            "cgpu_extender_pods", "Pods asking for GPU memory in the cache", registry=self.registry
        )
        self.assumed = Gauge(
            "cgpu_extender_assumed_pods",
            "Pods bound or being bound, not yet confirmed by the watch",
            registry=self.registry,
        )
