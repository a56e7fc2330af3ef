"""The operator files: Grafana dashboard, alerting rules, ServiceMonitor and scrape config."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from exporter_helpers import dashboard_targets

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "deploy" / "grafana" / "cgpu-dashboard.json"
PROM = REPO / "deploy" / "prometheus"
CONTRACT_METRICS = {
    "cgpu_container_gpu_memory_limit_bytes",
    "cgpu_container_gpu_memory_used_bytes",
    "cgpu_container_gpu_processes",
    "cgpu_gpu_memory_total_bytes",
    "cgpu_gpu_memory_used_bytes",
    "cgpu_gpu_memory_allocated_bytes",
    "cgpu_gpu_containers",
}
# Every metric the exporter serves (the contract's plus its own); a dashboard or rule that names
# anything else under cgpu_ has a typo.
SERVED = CONTRACT_METRICS | {
    "cgpu_container_gpu_memory_peak_bytes",
    "cgpu_container_gpu_memory_host_used_bytes",
    "cgpu_container_over_slice",
    "cgpu_container_gpu_compute_limit_percent",
    "cgpu_container_gpu_compute_used_percent",
    "cgpu_container_gpu_compute_host_percent",
    "cgpu_container_gpu_compute_out_of_turn_seconds_total",
    "cgpu_container_over_compute",
    "cgpu_compute_status_errors_total",
    "cgpu_exporter_compute_status_up",
    "cgpu_container_claim_info",
    "cgpu_gpu_memory_unattributed_bytes",
    "cgpu_enforcement_kills_total",
    "cgpu_gpu_healthy",
    "cgpu_ledger_errors_total",
    "cgpu_ledgers_skipped",
    "cgpu_exporter_nvml_up",
    "cgpu_exporter_pod_resources_up",
    "cgpu_exporter_scrape_duration_seconds",
}
PROMTOOL = shutil.which("promtool")


def _dashboard() -> dict[str, Any]:
    with GRAFANA.open() as f:
        return json.load(f)


def _metrics_in(expr: str) -> set[str]:
    return set(re.findall(r"\bcgpu_[a-z_]+", expr))


def test_dashboard_structure() -> None:
    dash = _dashboard()
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    panels = dash["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for panel in panels:
        grid = panel["gridPos"]
        assert {"x", "y", "w", "h"} <= set(grid) and grid["x"] + grid["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["title"] and panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            assert target["refId"] and target["expr"]
            assert _metrics_in(target["expr"]) <= SERVED, target["expr"]


def test_dashboard_covers_the_contract_and_the_views() -> None:
    used = set().union(*(_metrics_in(expr) for _, expr in dashboard_targets()))
    assert used >= CONTRACT_METRICS
    titles = " | ".join(p["title"].lower() for p in _dashboard()["panels"])
    for view in ("per-gpu", "% of its slice", "top containers", "free capacity per node"):
        assert view in titles, view


def _rules(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_alert_rules() -> None:
    plain = yaml.safe_load((PROM / "alerts.yaml").read_text())
    operator = yaml.safe_load((PROM / "prometheusrule.yaml").read_text())
    assert operator["kind"] == "PrometheusRule"
    assert operator["spec"] == plain, (
        "prometheusrule.yaml must carry the same groups as alerts.yaml"
    )
    alerts = {r["alert"]: r for r in _rules(plain)}
    assert {
        "CgpuContainerNearSliceLimit",
        "CgpuContainerOverSlice",
        "CgpuGpuUnhealthy",
        "CgpuExporterDown",
    } <= set(alerts)
    assert "0.95" in alerts["CgpuContainerNearSliceLimit"]["expr"]
    for rule in alerts.values():
        assert _metrics_in(rule["expr"]) <= SERVED, rule["expr"]
        assert rule["labels"]["severity"] in ("warning", "critical")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")
def test_alert_rules_with_promtool() -> None:
    check = subprocess.run(
        [str(PROMTOOL), "check", "rules", str(PROM / "alerts.yaml")], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    unit = subprocess.run(
        [str(PROMTOOL), "test", "rules", "alerts_test.yaml"],
        cwd=Path(__file__).parent,
        capture_output=True,
        text=True,
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr


def test_service_monitor_honours_labels() -> None:
    monitor = yaml.safe_load((PROM / "servicemonitor.yaml").read_text())
    assert monitor["kind"] == "ServiceMonitor"
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["honorLabels"] is True
    docs = list(yaml.safe_load_all((PROM / "exporter.yaml").read_text()))
    service = next(d for d in docs if d["kind"] == "Service")
    daemonset = next(d for d in docs if d["kind"] == "DaemonSet")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert {p["name"] for p in service["spec"]["ports"]} >= {
        e["port"] for e in monitor["spec"]["endpoints"]
    }
    container = daemonset["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["cgpu", "exporter"]
    assert any(a.startswith("--state-dir=") for a in container["args"])


def test_scrape_config_honours_labels() -> None:
    config = yaml.safe_load((PROM / "scrape-config.yaml").read_text())
    jobs = config["scrape_configs"]
    assert jobs and all(job["honor_labels"] is True for job in jobs)


def test_kustomization_lists_existing_files() -> None:
    kustomization = yaml.safe_load((PROM / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        assert (PROM / resource).is_file(), resource
