"""The extender's probes, as rendered, run against a real `cgpu scheduler-extender`.

Readiness asks /healthz (503 until the cluster is listed); liveness asks /version, so an
extender that cannot reach the API server is taken out of service but not restart-looped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_helpers import SCHEDULER, Obj, argv, container, helm_template, kustomize, one
from kube.apiserver import FakeApiServer
from kube.objects import gpu_node
from kube.processes import free_port, stop


def rendered_extender(source: str, port: int) -> Obj:
    """The profile-mode extender container, from the chart or the plain manifests, on `port`."""
    if source == "helm":
        objs = helm_template(f"scheduler.port={port}")
        return container(one(objs, "Deployment", "cgpu-scheduler"), "extender")
    deploy = one(kustomize(SCHEDULER / "profile"), "Deployment", "cgpu-scheduler")
    return json.loads(json.dumps(container(deploy, "extender")).replace("32766", str(port)))


def probe(cont: Obj, kind: str) -> int:
    """Run the container's exec probe here, as the kubelet runs it in the container."""
    spec = cont[f"{kind}Probe"]
    command = spec["exec"]["command"]
    done = subprocess.run(command, capture_output=True, timeout=spec.get("timeoutSeconds", 1))
    return done.returncode


@pytest.fixture
def start_extender(tmp_path: Path) -> Iterator:
    procs: list[subprocess.Popen[bytes]] = []

    def start(cont: Obj, kubeconfig: Path) -> subprocess.Popen[bytes]:
        args = argv(cont)
        assert args[:2] == ["cgpu", "scheduler-extender"]
        command = [sys.executable, "-m", "cgpu.cli", *args[1:], "--kubeconfig", str(kubeconfig)]
        env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        log = open(tmp_path / f"extender-{len(procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        stop(proc)


def wait_for(kind: str, cont: Obj, want: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while probe(cont, kind) != want:
        assert time.monotonic() < deadline, f"{kind} probe never exited {want}"
        time.sleep(0.2)


@pytest.mark.parametrize("source", ["helm", "plain"])
def test_probes_follow_the_extender_and_the_api_server(
    source: str, start_extender, tmp_path: Path
) -> None:
    api = FakeApiServer()
    try:
        api.create("nodes", gpu_node("n1", 1, 8))
        cont = rendered_extender(source, free_port())
        assert probe(cont, "readiness") != 0 and probe(cont, "liveness") != 0  # not started
        start_extender(cont, api.kubeconfig(tmp_path / "kubeconfig"))
        wait_for("readiness", cont, 0)
        assert probe(cont, "liveness") == 0
    finally:
        api.close()

    # An API server that cannot be reached: not ready (503), yet alive: no restart loop.
    cont = rendered_extender(source, free_port())
    start_extender(cont, tmp_path / "kubeconfig")  # the closed server's address
    wait_for("liveness", cont, 0)
    time.sleep(1.0)
    assert probe(cont, "readiness") != 0
    assert probe(cont, "liveness") == 0
