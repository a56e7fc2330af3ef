"""~200 pods through `cgpu scheduler-extender` (a real process) and a kube-scheduler-shaped peer.

GPU-sharing pods of mixed sizes and GPU counts, and pods without GPU memory, are scheduled onto
a simulated cluster in the fake API server. Afterwards no GPU holds more than it has (from the
pods' annotations), the pods without GPU memory never reached the extender, and
`kubectl-inspect-cgpu -o json` reports exactly what the annotations say.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from kube.apiserver import FakeApiServer
from kube.objects import gpu_node, gpu_pod
from kube_scheduler import KubeScheduler
from sched_peer import extender_cli

IDX, POD, DEV = "ALIYUN_COM_GPU_MEM_IDX", "ALIYUN_COM_GPU_MEM_POD", "ALIYUN_COM_GPU_MEM_DEV"
# (name, GPUs, units per GPU): a mixed cluster of 15 and 16 GiB cards, 2 to 8 per node.
NODES = [
    ("n0", 2, 15), ("n1", 4, 16), ("n2", 8, 16), ("n3", 4, 15), ("n4", 2, 16),
    ("n5", 4, 16), ("n6", 8, 15), ("n7", 4, 16), ("n8", 2, 16),
]  # fmt: skip


@pytest.fixture
def extender_process(kube_api: FakeApiServer, tmp_path: Path):
    """`cgpu scheduler-extender` as a process on a free port; yields its URL."""
    with extender_cli(kube_api, tmp_path) as (url, _log):
        yield url


def workload(rng: random.Random) -> list[dict]:
    """170 GPU-sharing pods (1 to 6 units, some over 2 or 4 GPUs, some two-container) and 30
    pods without GPU memory (one with a CPU-only init container)."""
    pods = []
    for i in range(170):
        kind = rng.random()
        if kind < 0.15:
            count = rng.choice([2, 4])
            pods.append(gpu_pod(f"multi-{i}", count * rng.randint(1, 3), gpu_count=count))
        elif kind < 0.25:
            pods.append(gpu_pod(f"pair-{i}", [rng.randint(1, 4), rng.randint(1, 4)]))
        else:
            pods.append(gpu_pod(f"share-{i}", rng.randint(1, 6)))
    for i in range(30):
        plain = gpu_pod(f"plain-{i}", 0)
        plain["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
        if i == 0:
            plain["spec"]["initContainers"] = [{"name": "init", "image": "busybox"}]
        pods.append(plain)
    rng.shuffle(pods)
    return pods


def gpu_usage(api: FakeApiServer) -> dict[tuple[str, int], int]:
    """Units held on each (node, GPU index), from the bound pods' gpushare annotations."""
    used: dict[tuple[str, int], int] = defaultdict(int)
    for pod in api.pods():
        notes = pod["metadata"].get("annotations") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or IDX not in notes:
            continue
        gpus = [int(g) for g in notes[IDX].split(",")]
        total = int(notes[POD])
        assert total % len(gpus) == 0, notes
        for gpu in gpus:
            used[(node, gpu)] += total // len(gpus)
    return used


def test_two_hundred_pods_never_overcommit_a_gpu(kube_api, extender_process, tmp_path):
    for i, (name, gpus, units) in enumerate(NODES):
        kube_api.create("nodes", gpu_node(name, gpus, units, ip=f"10.0.0.{i + 1}"))
    rng = random.Random(20261124)
    pods = workload(rng)
    for pod in pods:
        kube_api.create("pods", pod)

    scheduler = KubeScheduler(kube_api, extender_process, weight=10, seed=7)
    pending = [p["metadata"]["name"] for p in pods]
    refusals: dict[str, str] = {}
    extender_reasons: set[str] = set()  # what the extender said of nodes kube-scheduler passed
    for _ in range(3):  # the scheduling queue retries unschedulable pods
        still = []
        for name in pending:
            decision = scheduler.schedule_one("default", name)
            if decision.node is None:
                still.append(name)
                refusals[name] = decision.error or "; ".join(sorted(decision.failed.values()))
                extender_reasons |= set(decision.failed.values()) - {"Insufficient resources"}
        pending = still

    bound = {p["metadata"]["name"]: p for p in kube_api.pods() if p["spec"].get("nodeName")}
    plain = {p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith("plain-")}
    assert plain <= set(bound), "every pod without GPU memory fits on CPU"
    sent = set(scheduler.calls.filter) | set(scheduler.calls.prioritize) | set(scheduler.calls.bind)
    assert not sent & plain, "pods without managed resources must not reach the extender"
    assert set(scheduler.calls.bind) >= {n for n in bound if n not in plain}

    # The cluster is full: some GPU pods were refused, each with the extender's reason.
    gpu_bound = len(bound) - len(plain)
    assert 100 < gpu_bound < 170, (gpu_bound, len(pending))
    assert pending and all(refusals[name] for name in pending)
    # Some nodes had the units in total but not on enough GPUs: only the extender knows that.
    assert any("GPU" in reason for reason in extender_reasons), extender_reasons

    capacity = {(name, g): units for name, gpus, units in NODES for g in range(gpus)}
    used = gpu_usage(kube_api)
    over = {gpu: (u, capacity.get(gpu)) for gpu, u in used.items() if u > capacity.get(gpu, 0)}
    assert not over, f"over-committed GPUs: {over}"
    for name, pod in bound.items():
        if name in plain:
            continue
        notes = pod["metadata"]["annotations"]
        node = pod["spec"]["nodeName"]
        gpus = notes[IDX].split(",")
        assert len(gpus) == int(pod["metadata"]["labels"].get("aliyun.com/gpu-count", "1"))
        assert len(set(gpus)) == len(gpus)
        wanted = sum(int(c["resources"]["limits"]["aliyun.com/gpu-mem"])
                     for c in pod["spec"]["containers"])  # fmt: skip
        assert int(notes[POD]) == wanted
        assert int(notes[DEV]) == capacity[(node, int(gpus[0]))]

    # kubectl inspect cgpu reads the same API server and must agree with the annotations.
    env = {**os.environ, "KUBECONFIG": str(kube_api.kubeconfig(tmp_path / "kc-inspect"))}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    inspect = Path(sys.executable).with_name("kubectl-inspect-cgpu")
    run = subprocess.run([str(inspect), "-o", "json"], env=env, capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    seen = {}
    for node in report["nodes"]:
        for dev in node["devs"]:
            seen[(node["name"], dev["id"])] = dev["usedGPU"]
            assert dev["totalGPU"] == capacity[(node["name"], dev["id"])]
            assert dev["usedGPU"] == sum(p["usedGPU"] for p in dev["pods"])
    assert {gpu: n for gpu, n in seen.items() if n} == dict(used)
    assert sum(n["usedGPU"] for n in report["nodes"]) == sum(used.values())
