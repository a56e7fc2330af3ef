"""The compute host view's path in the deploy: the arbiter writes its status file where the
exporter reads it (the same hostPath, at the same path in both pods, so the arbiter's container
directory names are the exporter's)."""

from __future__ import annotations

from pathlib import Path

import pytest
from deploy_helpers import (
    REPO,
    argv,
    container,
    helm_template,
    kustomize,
    one,
    parse_cgpu,
    pod_spec,
)

from cgpu.compute.cli import settings_from
from cgpu.core.computestatus import status_path


def _mounts(ds: dict, name: str) -> dict[str, str]:
    """{mountPath: hostPath} of a container's hostPath volumes."""
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod_spec(ds)["volumes"] if "hostPath" in v}
    cont = container(ds, name)
    return {
        m["mountPath"]: volumes[m["name"]] for m in cont["volumeMounts"] if m["name"] in volumes
    }


@pytest.mark.parametrize("state", ["/var/lib/cgpu", "/data/cgpu"])
def test_chart_arbiter_writes_where_the_exporter_reads(state: str) -> None:
    objs = helm_template(f"stateDir={state}")
    arbiter = one(objs, "DaemonSet", "cgpu-compute-arbiter")
    exporter = one(objs, "DaemonSet", "cgpu-exporter")
    written = settings_from(parse_cgpu(argv(container(arbiter, "compute-arbiter"))[1:])).status
    read_from = parse_cgpu(argv(container(exporter, "exporter"))[1:]).state_dir
    assert written == status_path(read_from) == Path(state, "compute-arbiter.json")
    assert _mounts(arbiter, "compute-arbiter")[state] == state
    assert _mounts(exporter, "exporter")[state] == state


def test_plain_manifests_agree() -> None:
    (arbiter,) = kustomize(REPO / "deploy" / "compute-arbiter")
    exporter = next(
        o for o in kustomize(REPO / "deploy" / "prometheus") if o["kind"] == "DaemonSet"
    )
    written = settings_from(parse_cgpu(argv(container(arbiter, "compute-arbiter"))[1:])).status
    read_from = parse_cgpu(argv(container(exporter, "exporter"))[1:]).state_dir
    assert written == status_path(read_from)
    assert _mounts(arbiter, "compute-arbiter")["/var/lib/cgpu"] == "/var/lib/cgpu"
    assert _mounts(exporter, "exporter")["/var/lib/cgpu"] == "/var/lib/cgpu"
