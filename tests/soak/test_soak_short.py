"""The soak, short: 180 container lifecycles through the device plugin, the DRA driver and the
hook, with the exporter scraped each second (benchmarks/soak.py; the long run is in
docs/performance.md).

Leftovers and ledger totals are asserted strictly. Growth is asserted in a form a busy 2-core
machine cannot make flaky. Descriptors and threads: their floor over the last tenth of the run
may exceed the mid-run floor by at most one. A leak of one per lifecycle of any kind would add
30 over the second half; a bounded pool reaching a new peak adds one, and does so at any time
(the long runs saw the DRA driver's descriptors go from 11 to 12 at lifecycle 3,060 of 5,000,
and the device plugin's threads from 12 to 13 at lifecycle 8,323 of 10,000, and stay there).
Resident memory: within 10% (a short run cannot show the long run's 5%; a leak of a few KiB per
lifecycle is found there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
LIFECYCLES = 180
DAEMONS = ("device-plugin", "dra-driver", "exporter")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One short soak's JSON report."""
    if os.geteuid() != 0:
        pytest.skip("the hook's stand-in containers need root (a mount namespace)")
    out = tmp_path_factory.mktemp("soak") / "report.json"
    run = subprocess.run(
        [sys.executable, "-P", str(REPO / "benchmarks" / "soak.py"),
         "--lifecycles", str(LIFECYCLES), "--seed", "7", "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert out.is_file(), f"the soak wrote no report:\n{run.stdout}\n{run.stderr}"
    return json.loads(out.read_text())


def test_every_lifecycle_ran_with_exact_ledger_totals(report: dict[str, Any]) -> None:
    life = report["lifecycles"]
    assert life["failures"] == []
    assert life["done"] == LIFECYCLES
    assert life["by_kind"] == {"device-plugin": 60, "dra": 60, "hook": 60}
    assert 0 < life["killed"] < LIFECYCLES  # both endings were exercised
    # Once everything is gone, NVML shows no memory used, and the exporter no container.
    assert report["final"] == {"gpu_memory_used_bytes": 0, "container_series": 0}


def test_nothing_is_left_behind(report: dict[str, Any]) -> None:
    assert report["leftovers"] == {
        "container_dirs": [], "ledgers": [], "cdi_specs": [], "dra_claims": []
    }  # fmt: skip
    assert report["host_mounts_added"] == 0


def test_the_daemons_ran_throughout_and_stopped_cleanly(report: dict[str, Any]) -> None:
    assert report["daemons_died"] == []
    assert report["exit_statuses"] == dict.fromkeys(DAEMONS, 0)
    for name in DAEMONS:
        samples = report["daemons"][name]["series"]
        assert len(samples) >= 10, f"{name}: {len(samples)} samples"
        assert samples[-1][1] == LIFECYCLES  # sampled after the last lifecycle too


def test_fds_and_threads_are_flat_and_memory_bounded(report: dict[str, Any]) -> None:
    for name in DAEMONS:
        daemon = report["daemons"][name]
        assert daemon["fds"]["end"] <= daemon["fds"]["mid"] + 1, (name, daemon["fds"])
        assert daemon["threads"]["end"] <= daemon["threads"]["mid"] + 1, (name, daemon["threads"])
        assert daemon["rss_kib"]["growth"] <= 0.10, (name, daemon["rss_kib"])


def test_every_scrape_answered(report: dict[str, Any]) -> None:
    assert report["scrape_failures"] == []
    assert report["scrapes"] >= 10
    # The exporter's own work per scrape: its CPU time, which other jobs on the machine do not
    # inflate (wall-clock p99 is the long run's criterion).
    assert report["exporter_cpu_ms"]["p50"] <= 50, report["exporter_cpu_ms"]
