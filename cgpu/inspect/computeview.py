"""The host's view of compute on each node, for `kubectl inspect cgpu -d`.

The figures live on the node (the compute arbiter's status file), which `kubectl inspect` runs
far from; the node's `cgpu exporter` serves them. So inspect scrapes each shown node's exporter
pod (label app.kubernetes.io/name=cgpu-exporter, as the manifests and the chart label it)
through the API server's pod proxy, the path `kubectl get --raw` takes: no address of the
node's own is needed, and the caller's RBAC decides (it needs `get` on `pods/proxy`). A node
whose exporter cannot be scraped says why in one line; a node with no exporter pod shows
nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from cgpu.core.kube import KubeError

EXPORTER_SELECTOR = "app.kubernetes.io/name=cgpu-exporter"
DEFAULT_PORT = 9445
LIMIT = "cgpu_container_gpu_compute_limit_percent"
USED = "cgpu_container_gpu_compute_used_percent"
HOST = "cgpu_container_gpu_compute_host_percent"
OUT_OF_TURN = "cgpu_container_gpu_compute_out_of_turn_seconds_total"
OVER = "cgpu_container_over_compute"
INFO = "cgpu_container_gpu_compute_info"  # labels policy and priority
STATUS_UP = "cgpu_exporter_compute_status_up"
FIGURES = {LIMIT: "limit", USED: "used", HOST: "host", OUT_OF_TURN: "out_of_turn", OVER: "over"}
MAX_BYTES = 16 << 20  # an exporter's page for hundreds of containers is well under 1 MiB


@dataclass
class ContainerRow:
    """One container on one GPU of a node, as its exporter serves it (None: not served)."""

    namespace: str
    pod: str
    container: str
    gpu_index: str
    limit: float | None = None
    used: float | None = None
    host: float | None = None
    out_of_turn: float | None = None
    over: float | None = None
    policy: str = ""  # fixed or share ("": not served)
    priority: str = ""  # high, normal or low


@dataclass
class NodeCompute:
    """One node's compute host view: its rows, whether the arbiter's status was current, or
    why it could not be read (`error`)."""

    exporter: str  # namespace/pod of the exporter scraped
    rows: list[ContainerRow] = field(default_factory=list)
    status_up: bool = False
    error: str = ""


Get = Callable[[str, str, int], bytes]  # (namespace, pod, port) -> the /metrics page


def exporter_pods(pods: Iterable[dict[str, Any]]) -> dict[str, tuple[str, str, int]]:
    """{node: (namespace, pod, metrics port)} of the running exporter pods."""
    out: dict[str, tuple[str, str, int]] = {}
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        node = spec.get("nodeName") or ""
        if not node or (pod.get("status") or {}).get("phase") != "Running":
            continue
        port = DEFAULT_PORT
        for container in spec.get("containers") or []:
            for entry in container.get("ports") or []:
                if entry.get("name") == "metrics" and isinstance(entry.get("containerPort"), int):
                    port = entry["containerPort"]
        out.setdefault(node, (meta.get("namespace", ""), meta.get("name", ""), port))
    return out


def parse(text: str) -> tuple[list[ContainerRow], bool]:
    """The compute rows and the status-up flag of an exporter's page (text format)."""
    from prometheus_client.parser import text_string_to_metric_families

    rows: dict[tuple[str, str, str, str], ContainerRow] = {}
    up = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == STATUS_UP:
                up = sample.value == 1
            attr = FIGURES.get(sample.name)
            info = sample.name == INFO
            if (attr is None and not info) or not math.isfinite(sample.value):
                continue
            labels = sample.labels
            key = tuple(labels.get(k, "") for k in ("namespace", "pod", "container", "gpu_index"))
            row = rows.setdefault(key, ContainerRow(*key))  # type: ignore[arg-type]
            if info:
                row.policy, row.priority = labels.get("policy", ""), labels.get("priority", "")
            else:
                setattr(row, attr, sample.value)
    ordered = sorted(rows.values(), key=lambda r: (r.pod, r.namespace, r.container, r.gpu_index))
    return ordered, up


def scrape(
    nodes: Iterable[str], exporters: dict[str, tuple[str, str, int]], get: Get
) -> dict[str, NodeCompute]:
    """Each shown node's compute host view, from its exporter (nodes without one are left out)."""
    out = {}
    for node in nodes:
        found = exporters.get(node)
        if found is None:
            continue
        namespace, name, port = found
        view = NodeCompute(f"{namespace}/{name}")
        try:
            page = get(namespace, name, port)
            if len(page) > MAX_BYTES:
                raise ValueError(f"a page over {MAX_BYTES} bytes")
            view.rows, view.status_up = parse(page.decode("utf-8", "replace"))
        except KubeError as err:
            view.error = " ".join(str(err).split())
        except (ValueError, TypeError) as err:  # not the text format
            view.error = f"unreadable metrics: {' '.join(str(err).split())[:200]}"
        out[node] = view
    return out


def _cell(text: str) -> str:
    """A label value as one table cell: no tabs, newlines or other control characters."""
    return "".join(c if c.isprintable() else "?" for c in text) or "-"


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def details_block(view: NodeCompute) -> str:
    """The lines `-d` adds to a node (tab-separated, before the tabwriter aligns them)."""
    if view.error:
        return f"Compute host view :\tunavailable ({view.exporter}: {view.error})\n"
    if not view.status_up:
        return f"Compute host view :\tno current compute-arbiter status ({view.exporter})\n"
    rows = [r for r in view.rows if r.limit is not None or r.host is not None]
    if not rows:
        return "Compute host view :\tno container with a compute limit\n"
    text = f"\nCompute host view ({view.exporter}):\n"
    text += "NAME\tNAMESPACE\tCONTAINER\tGPU\tLIMIT(%)\tPRIORITY\tUSED(%)\tHOST 10s(%)\t"
    text += "OUT OF TURN(s)\tOVER\n"
    for r in rows:
        over = "-" if r.over is None else ("yes" if r.over else "no")
        names = (r.pod, r.namespace, r.container, r.gpu_index)
        text += "".join(f"{_cell(n)}\t" for n in names) + f"{_number(r.limit, 0)}\t"
        text += f"{_cell(r.priority)}\t"
        text += f"{_number(r.used)}\t{_number(r.host)}\t{_number(r.out_of_turn)}\t{over}\n"
    return text


def as_json(view: NodeCompute) -> dict[str, Any]:
    """The same for `-o json -d`."""
    return {
        "exporter": view.exporter,
        "statusUp": view.status_up,
        "error": view.error,
        "containers": [
            {
                "namespace": r.namespace,
                "pod": r.pod,
                "container": r.container,
                "gpuIndex": r.gpu_index,
                "limitPercent": r.limit,
                "policy": r.policy or None,
                "priority": r.priority or None,
                "usedPercent": r.used,
                "hostPercent": r.host,
                "outOfTurnSeconds": r.out_of_turn,
                "overCompute": None if r.over is None else bool(r.over),
            }
            for r in view.rows
        ],
    }
