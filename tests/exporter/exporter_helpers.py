"""Reading what a collector yields, as {metric: {labels: value}}."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

Series = dict[str, dict[frozenset[tuple[str, str]], float]]


def scrape(collector: Collector) -> Series:
    """One scrape through the text exposition format, as Prometheus would see it."""
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    registry.unregister(collector)
    out: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return out


def labels(**kv: str) -> frozenset[tuple[str, str]]:
    """A label set as `scrape` keys it."""
    return frozenset(kv.items())


def ctr(namespace: str, pod: str, container: str, uuid: str, index: str) -> frozenset:
    """The label set of a container series."""
    return labels(namespace=namespace, pod=pod, container=container, gpu_uuid=uuid, gpu_index=index)
