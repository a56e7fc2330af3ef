"""The compute arbiter's manifests (deploy/compute-arbiter) and the chart's computeArbiter: valid,
the same command in both, with the host's pids and state dir, and a command line that the real
`cgpu compute-arbiter` accepts, means what the values say, and runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from deploy_helpers import (
    REPO,
    argv,
    cgpu_has,
    container,
    find,
    flags,
    helm_template,
    kustomize,
    one,
    parse_cgpu,
    pod_spec,
    validate,
)

ARBITER = REPO / "deploy" / "compute-arbiter"
NAME = "cgpu-compute-arbiter"
UUID = "GPU-5eed0000-0000-4000-8000-000000000000"


def _daemonset(source: str, *sets: str) -> dict:
    objs = helm_template(*sets) if source == "helm" else kustomize(ARBITER)
    return one(objs, "DaemonSet", NAME)


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((ARBITER / "kustomization.yaml").read_text())
    on_disk = {p.name for p in ARBITER.glob("*.yaml") if p.name != "kustomization.yaml"}
    assert set(kustomization["resources"]) == on_disk


def test_plain_manifests_are_valid_and_need_no_rbac() -> None:
    objs = kustomize(ARBITER)
    validate(objs)
    assert [(o["kind"], o["metadata"]["name"]) for o in objs] == [("DaemonSet", NAME)]
    assert objs[0]["metadata"]["namespace"] == "kube-system"


@pytest.mark.parametrize("source", ["helm", "plain"])
def test_arbiter_runs_a_real_cgpu_subcommand_on_the_host_state_dir(source: str) -> None:
    """hostPID (the peer pids must be /proc's and NVML's), NVML from the NVIDIA runtime, the
    state dir read-write at its host path, and the container's args parse with the real CLI."""
    ds = _daemonset(source)
    spec = pod_spec(ds)
    assert spec["hostPID"] is True
    assert spec["automountServiceAccountToken"] is False and "serviceAccountName" not in spec
    assert spec["nodeSelector"] == {"gpushare": "true"}
    assert spec["priorityClassName"] == "system-node-critical"
    cont = container(ds, "compute-arbiter")
    assert argv(cont)[:2] == ["cgpu", "compute-arbiter"]
    assert cgpu_has("compute-arbiter")
    parse_cgpu(argv(cont)[1:])
    env = {e["name"]: e.get("value") for e in cont["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert env["CGPU_DISABLE"] == "true"
    assert flags(cont) == {
        "containers": "/var/lib/cgpu/containers",
        "quantum-ms": "20",
        "status": "/var/lib/cgpu/compute-arbiter.json",
    }
    (mount,) = cont["volumeMounts"]
    assert mount["mountPath"] == "/var/lib/cgpu" and not mount.get("readOnly", False)
    volumes = {v["name"]: v["hostPath"] for v in spec["volumes"]}
    assert volumes[mount["name"]] == {"path": "/var/lib/cgpu", "type": "DirectoryOrCreate"}


def test_chart_and_manifests_run_the_same_command() -> None:
    chart = container(_daemonset("helm"), "compute-arbiter")
    plain = container(_daemonset("plain"), "compute-arbiter")
    assert argv(chart) == argv(plain)
    assert chart["env"] == plain["env"]
    assert chart["securityContext"] == plain["securityContext"]
    assert chart["resources"] == plain["resources"]


def test_values_reach_the_arbiter_settings() -> None:
    from cgpu.compute.cli import settings_from

    ds = _daemonset(
        "helm",
        "stateDir=/data/cgpu",
        "computeArbiter.quantumMs=8",
        "computeArbiter.extraArgs[0]=--drain-cap-ms=500",
    )
    cont = container(ds, "compute-arbiter")
    settings = settings_from(parse_cgpu(argv(cont)[1:]))
    assert settings.roots == (Path("/data/cgpu/containers"),)
    assert settings.status == Path("/data/cgpu/compute-arbiter.json")
    assert settings.quantum_ns == 8_000_000 and settings.drain_cap_ns == 500_000_000
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod_spec(ds)["volumes"]}
    assert {volumes[m["name"]]: m["mountPath"] for m in cont["volumeMounts"]} == {
        "/data/cgpu": "/data/cgpu"
    }


def test_arbiter_can_be_turned_off() -> None:
    assert not find(helm_template("computeArbiter.enabled=false"), "DaemonSet", NAME)


def test_rendered_command_serves_the_state_dir_and_stops_on_sigterm(tmp_path: Path) -> None:
    """The chart's command, run here with the real cgpu (NVML off), makes compute.sock in a
    container directory with a compute line, writes the status file, and exits 0 on SIGTERM."""
    from cgpu.core.config import write_config

    ds = _daemonset("helm", f"stateDir={tmp_path}", "computeArbiter.extraArgs[0]=--no-nvml")
    cont = container(ds, "compute-arbiter")
    limited = tmp_path / "containers" / "limited"
    unlimited = tmp_path / "containers" / "unlimited"
    elsewhere = tmp_path / "containers" / "elsewhere"
    for directory in (limited, unlimited, elsewhere):
        directory.mkdir(parents=True)
    write_config(limited, {UUID: 1 << 30}, {UUID: (30, "fixed")})
    write_config(unlimited, {UUID: 1 << 30})  # best effort beside the limited one
    write_config(elsewhere, {"GPU-99999999-9999-9999-9999-999999999999": 1 << 30})
    env = {e["name"]: e["value"] for e in cont["env"]}
    env["PATH"] = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    log = tmp_path / "arbiter.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv(cont), env={**os.environ, **env}, stderr=out)
    status = tmp_path / "compute-arbiter.json"
    try:
        deadline = time.monotonic() + 15
        sockets = (limited / "compute.sock", unlimited / "compute.sock")
        while not (all(s.exists() for s in sockets) and status.exists()):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no compute.sock or status file"
            time.sleep(0.05)
        assert not (elsewhere / "compute.sock").exists(), "a socket on a GPU nobody limits"
        assert "gpus" in json.loads(status.read_text())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0, log.read_text()[-3000:]
    finally:
        proc.kill()
        proc.wait()
