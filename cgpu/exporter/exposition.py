"""The text exposition format (0.0.4), written directly for the exporter's own families.

`prometheus_client.generate_latest` builds a `Sample` with a label dict for every series and
escapes every label name and value again at every scrape: for 200 containers (about 1,400
series) that was a third of a scrape. A `Family` keeps its series as rows of label values, and
`render` writes them with label text it escaped once per distinct label set. The bytes are
those `generate_latest` writes for the same families (the tests compare them); any other
metric (the process collector's) is rendered by `generate_latest` itself.

Nothing here outlives a scrape but the texts of label sets and values, which depend only on
what they are made from, so a cached text can never be stale. Each cache is cleared when it
grows past what recent scrapes used.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

Row = tuple[tuple[str, ...], float]

# Names every prometheus-client version writes as they are (newer ones escape others).
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

_CACHE_SLACK = 4096  # entries a cache may hold beyond the rows of one scrape


def escape_value(value: str) -> str:
    """A label value as the text format quotes it: backslash, newline and quote escaped."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


@dataclass
class FamilySpec:
    """What never changes about a family: its name, help, type and label names.

    `prefixes` maps label values (in `labels` order) to the start of their sample line:
    the sample name and the label set, names sorted as `generate_latest` sorts them.
    """

    name: str
    documentation: str
    type: str  # "gauge" or "counter"
    labels: tuple[str, ...] = ()
    header: str = field(init=False)
    sample_name: str = field(init=False)
    prefixes: dict[tuple[str, ...], str] = field(init=False, default_factory=dict)
    _order: tuple[tuple[int, str], ...] = field(init=False)

    def __post_init__(self) -> None:
        if self.type not in ("gauge", "counter"):
            raise ValueError(f"unsupported family type {self.type!r}")
        if self.type == "counter" and self.name.endswith("_total"):
            raise ValueError(f"a counter is named without _total: {self.name!r}")
        bad = [n for n in self.labels if not _LABEL_NAME.fullmatch(n) or n.startswith("__")]
        if not _METRIC_NAME.fullmatch(self.name) or bad or len(set(self.labels)) < len(self.labels):
            raise ValueError(f"invalid family {self.name!r} {self.labels}")
        self.sample_name = self.name + "_total" if self.type == "counter" else self.name
        doc = self.documentation.replace("\\", r"\\").replace("\n", r"\n")
        self.header = f"# HELP {self.sample_name} {doc}\n# TYPE {self.sample_name} {self.type}\n"
        self._order = tuple(sorted(enumerate(self.labels), key=_by_name))

    def prefix(self, values: tuple[str, ...]) -> str:
        """`name{label="value",...} ` for these label values (cached)."""
        found = self.prefixes.get(values)
        if found is None:
            pairs = ",".join(f'{name}="{escape_value(values[i])}"' for i, name in self._order)
            name = self.sample_name
            found = f"{name}{{{pairs}}} " if pairs else f"{name} "
            self.prefixes[values] = found
        return found


def _by_name(item: tuple[int, str]) -> str:
    return item[1]


class Family(Metric):
    """One scrape's series of a `FamilySpec`: rows of (label values, value).

    It is a `prometheus_client` metric too: `samples` builds the usual samples on demand, so
    the registry, `generate_latest` and the OpenMetrics encoder handle it like any other.
    """

    def __init__(self, spec: FamilySpec, value: float | None = None) -> None:
        self.rows: list[Row] = []
        self.spec = spec
        super().__init__(spec.name, spec.documentation, spec.type)
        if value is not None:
            self.add((), value)

    def add(self, labels: Sequence[str], value: float) -> None:
        """One series: its label values in the spec's label order, and its value."""
        values = tuple(labels)
        if len(values) != len(self.spec.labels):
            raise ValueError(f"{self.name}: {len(values)} label values for {self.spec.labels}")
        self.rows.append((values, value))

    @property  # type: ignore[override]
    def samples(self) -> list[Sample]:
        """The rows as `prometheus_client` samples."""
        names, name = self.spec.labels, self.spec.sample_name
        return [Sample(name, dict(zip(names, row, strict=True)), value) for row, value in self.rows]

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        """`Metric.__init__` sets an empty list; a family's series are its rows."""
        if value:
            raise AttributeError("add series to a Family with add()")


class _Values:
    """Texts of integer values (bytes, counts), the most frequent ones in an exposition."""

    def __init__(self) -> None:
        self._texts: dict[int, str] = {}

    def text(self, value: float) -> str:
        # Only ints are cached: equal floats can differ in text (0.0 and -0.0).
        if type(value) is not int:
            return floatToGoString(value)
        found = self._texts.get(value)
        if found is None:
            if len(self._texts) > _CACHE_SLACK:
                self._texts.clear()
            found = self._texts[value] = floatToGoString(value)
        return found


class _One:
    """A collector of one metric, to render it with `generate_latest`."""

    def __init__(self, metric: Metric) -> None:
        self._metric = metric

    def collect(self) -> Iterator[Metric]:
        yield self._metric


class Renderer:
    """Writes the text exposition of metrics.

    Safe to share between threads without a lock: its caches only hold texts computed from
    their keys, so a race costs at most computing one twice.
    """

    def __init__(self) -> None:
        self._values = _Values()

    def render(self, metrics: Iterable[Metric]) -> bytes:
        """The text format (version 0.0.4) of `metrics`, as `generate_latest` writes it."""
        out: list[str] = []
        for metric in metrics:
            if isinstance(metric, Family):
                self._family(metric, out)
            else:
                out.append(generate_latest(_One(metric)).decode("utf-8"))
        return "".join(out).encode("utf-8")

    def _family(self, family: Family, out: list[str]) -> None:
        spec, text = family.spec, self._values.text
        if len(spec.prefixes) > len(family.rows) + _CACHE_SLACK:
            spec.prefixes.clear()  # label sets of containers long gone
        prefixes, prefix = spec.prefixes, spec.prefix
        out.append(spec.header)
        for labels, value in family.rows:
            start = prefixes.get(labels) or prefix(labels)
            out.append(f"{start}{text(value)}\n")


_RENDERER = Renderer()


def render(metrics: Iterable[Metric]) -> bytes:
    """The text exposition of `metrics` (for example a registry's `collect()`)."""
    return _RENDERER.render(metrics)
