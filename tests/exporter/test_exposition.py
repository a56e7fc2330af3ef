"""The exporter's own text exposition: the bytes prometheus_client writes, never stale data."""

from __future__ import annotations

import gzip
import io
import math
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from exporter_helpers import GIB, MIB, UUID0, Collected, FakeNvml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from cgpu.exporter.collector import CgpuCollector
from cgpu.exporter.exposition import Family, FamilySpec, Renderer, render
from cgpu.exporter.nvml import NvmlSource
from cgpu.exporter.server import MetricsServer

HOSTILE = [
    "",
    'quote"inside',
    "back\\slash",
    "new\nline",
    "\\n literal",
    "ünïcødé ✓",
    'all\\"\n"\\',
    "{braces},=",
]


def _both(metrics: list[Metric]) -> tuple[bytes, bytes]:
    return render(metrics), generate_latest(Collected(metrics))


def test_hostile_label_values_and_odd_values_render_as_prometheus_client_does() -> None:
    doc = 'help with \\ and\nnewline and "quotes"'
    family = Family(FamilySpec("cgpu_test_hostile", doc, "gauge", ("b", "a")))
    values = [0, -0.0, 1, 2.5, 1e-9, 123456789, 2**63, -(2**40), math.inf, -math.inf, math.nan]
    values.append(True)
    for i, value in enumerate(values):
        family.add((HOSTILE[i % len(HOSTILE)], HOSTILE[(i + 3) % len(HOSTILE)]), value)
    counter = Family(FamilySpec("cgpu_test_events", "Events.", "counter", ("reason",)))
    counter.add(("x",), 7)
    plain = Family(FamilySpec("cgpu_test_up", "Up.", "gauge"), 1)
    other = GaugeMetricFamily("cgpu_test_other", "Rendered by prometheus_client.", labels=["l"])
    other.add_metric(['v"'], 3)
    ours, theirs = _both([family, counter, plain, other])
    assert ours == theirs
    parsed = {f.name: f for f in text_string_to_metric_families(ours.decode())}
    got = {tuple(sorted(s.labels.items())) for s in parsed["cgpu_test_hostile"].samples}
    assert (("a", HOSTILE[3]), ("b", HOSTILE[0])) in got
    assert parsed["cgpu_test_events"].samples[0].name == "cgpu_test_events_total"


def test_a_row_must_have_one_value_per_label() -> None:
    family = Family(FamilySpec("cgpu_test_rows", "Rows.", "gauge", ("a", "b")))
    with pytest.raises(ValueError, match="label values"):
        family.add(("only-one",), 1)


@pytest.mark.parametrize(
    ("name", "kind", "labels"),
    [
        ("bad-name", "gauge", ()),
        ("cgpu_test", "histogram", ()),
        ("cgpu_test_total", "counter", ()),
        ("cgpu_test", "gauge", ("bad-label",)),
        ("cgpu_test", "gauge", ("__reserved",)),
        ("cgpu_test", "gauge", ("a", "a")),
    ],
)
def test_families_it_cannot_write_as_prometheus_client_does_are_refused(
    name: str, kind: str, labels: tuple[str, ...]
) -> None:
    with pytest.raises(ValueError):
        FamilySpec(name, "Help.", kind, labels)


def test_label_text_cache_stays_bounded() -> None:
    spec = FamilySpec("cgpu_test_churn", "Churn.", "gauge", ("pod",))
    renderer = Renderer()
    for scrape in range(40):  # 200 pods a scrape, new names every scrape (containers churning)
        family = Family(spec)
        for pod in range(200):
            family.add((f"pod-{scrape}-{pod}",), pod)
        renderer.render([family])
        assert len(spec.prefixes) <= 200 + 4096 + 200


@pytest.fixture
def collector(state_dir: Path, fake_nvml: FakeNvml) -> CgpuCollector:
    """A collector with a clock that stands still, so two renderings can be compared."""
    return CgpuCollector(state_dir, gpus=NvmlSource(loader=lambda: fake_nvml), clock=lambda: 1.0)


def _series(text: bytes) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for f in text_string_to_metric_families(text.decode())
        for s in f.samples
    }


def test_every_scrape_is_fresh(
    collector: CgpuCollector, make_container: Callable[..., Path], hold: Callable
) -> None:
    """Cached label texts never keep a series alive or an old value."""
    registry = CollectorRegistry()
    registry.register(collector)
    a = make_container("a", {UUID0: 4 * GIB}, namespace="ns", pod='p"a', container="c\n")
    b = make_container("b", {UUID0: 2 * GIB}, namespace="ns", pod="pb", container="c")
    key_a = frozenset(
        {("namespace", "ns"), ("pod", 'p"a'), ("container", "c\n"), ("gpu_uuid", UUID0)}
        | {("gpu_index", "0")}
    )
    used = "cgpu_container_gpu_memory_used_bytes"
    first = render(registry.collect())
    assert first == generate_latest(registry)
    assert _series(first)[(used, key_a)] == 0
    holder = hold(a / "cgpu.ledger", {0: 300 * MIB})
    second = render(registry.collect())
    assert _series(second)[(used, key_a)] == 300 * MIB
    holder.kill()
    shutil.rmtree(b)
    third = _series(render(registry.collect()))
    assert third[(used, key_a)] == 0
    assert not [k for k in third if ("pod", "pb") in k[1]]


@pytest.fixture
def server(collector: CgpuCollector) -> Iterator[str]:
    registry = CollectorRegistry()
    registry.register(collector)
    srv = MetricsServer(registry, "127.0.0.1", 0)
    srv.start()
    try:
        yield f"http://127.0.0.1:{srv.port}"
    finally:
        srv.stop()


def _get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, dict(reply.headers), reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_server_sends_the_text_format_to_prometheus(
    server: str, collector: CgpuCollector, make_container: Callable[..., Path]
) -> None:
    make_container("a", {UUID0: 4 * GIB}, namespace="ns", pod="p", container="c")
    # What Prometheus 2 and 3 send: OpenMetrics preferred, the text format accepted.
    accept = (
        "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
        "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
    )
    status, headers, body = _get(f"{server}/metrics", Accept=accept, **{"Accept-Encoding": "gzip"})
    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert headers["Content-Encoding"] == "gzip"
    text = gzip.GzipFile(fileobj=io.BytesIO(body)).read()
    registry = CollectorRegistry()
    registry.register(collector)
    assert text == generate_latest(registry)
    status, headers, plain = _get(f"{server}/metrics")
    assert status == 200 and "Content-Encoding" not in headers
    assert b'cgpu_container_gpu_memory_limit_bytes{container="c",gpu_index="0"' in plain


def test_server_keeps_prometheus_client_answers_for_the_rest(server: str) -> None:
    status, _, body = _get(f"{server}/metrics?name[]=cgpu_exporter_nvml_up")
    assert status == 200
    families = text_string_to_metric_families(body.decode())
    assert [f.name for f in families] == ["cgpu_exporter_nvml_up"]
    assert _get(f"{server}/healthz")[2] == b"ok\n"
    request = urllib.request.Request(f"{server}/metrics", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 405
