"""One container lifecycle through each host path: allocate, run, exit or SIGKILL, remove.

- `device-plugin`: the pod appears in pod-resources, Allocate over the kubelet's gRPC, the
  process runs, the pod goes away, and the plugin's own clean-up removes the directory (a
  `Reaper` waits for that, while the next lifecycles run, and frees the pod's device IDs).
- `dra`: a claim allocated in the API server, NodePrepareResources, the process runs,
  NodeUnprepareResources (directory and CDI spec gone), the claim deleted.
- `hook`: `cgpu hook` as a createRuntime hook for a stand-in container (a process in a mount
  namespace of its own, with a bundle whose rootfs is empty): container directory, ledger and
  the real injector's bind mounts; the process runs; `cgpu hook poststop`.

The process is tests/exporter/workload.c under the real shim (LD_PRELOAD) on the simulator,
with the container's environment and its ledger directory (the host side of the mount): it
retains a context and allocates. While it holds, its ledger must read exactly its bytes plus
the context cost; once it is gone (exited or SIGKILLed and reaped), exactly zero.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from soak_stack import CTX_MIB, DP_RESOURCE, NODE, Node, cgpu_command, wait_for

from cgpu.core.config import load_config, load_contexts
from cgpu.core.ledger import read_ledger
from cgpu.core.paths import shim_path

MIB = 1 << 20
KINDS = ("device-plugin", "dra", "hook")
NAMESPACE = "soak"


class LifecycleError(AssertionError):
    """A lifecycle went wrong: a failed call, a wrong ledger total, a directory left behind."""


@dataclass(frozen=True)
class Plan:
    """What one lifecycle does."""

    number: int
    kind: str
    kill: bool  # SIGKILL the process (and the stand-in init) rather than let it exit
    mib: int  # what the process allocates
    gib: int  # the slice
    gpu: int
    hold_s: float


def plans(count: int, seed: int) -> list[Plan]:
    """`count` lifecycles, the three kinds in turn, the rest drawn from `seed`."""
    rng = random.Random(seed)
    return [
        Plan(n, KINDS[n % 3], rng.random() < 0.5, rng.choice((16, 64, 200)), rng.choice((1, 2)),
             rng.randrange(2), rng.uniform(0.0, 0.2))
        for n in range(count)
    ]  # fmt: skip


class DevicePool:
    """The device plugin's IDs not held by a live pod: the kubelet hands out only free ones."""

    def __init__(self, ids: list[str]) -> None:
        self._free: dict[str, list[str]] = {}
        for device in ids:
            self._free.setdefault(device.rsplit("-", 1)[0], []).append(device)
        self._cond = threading.Condition()

    def take(self, count: int, gpu: int) -> list[str]:
        """`count` free IDs of one GPU (preferring GPU `gpu`); waits while none has enough."""
        with self._cond:
            uuids = sorted(self._free)
            order = uuids[gpu % len(uuids) :] + uuids[: gpu % len(uuids)]
            while True:
                for uuid in order:
                    if len(self._free[uuid]) >= count:
                        taken, self._free[uuid] = self._free[uuid][:count], self._free[uuid][count:]
                        return taken
                self._cond.wait(1.0)

    def give(self, ids: list[str]) -> None:
        """Return IDs whose pod is gone."""
        with self._cond:
            for device in ids:
                self._free[device.rsplit("-", 1)[0]].append(device)
            self._cond.notify_all()


class PodList:
    """What the fake pod-resources lists, changed atomically from many lifecycles."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._lock = threading.Lock()
        self._pods: dict[str, list[str]] = {}

    def set(self, pod: str, ids: list[str] | None) -> None:
        """List `pod` with its IDs, or (None) stop listing it."""
        with self._lock:
            if ids is None:
                self._pods.pop(pod, None)
            else:
                self._pods[pod] = ids
            self._node.pod_resources.set_pods(
                [
                    (NAMESPACE, name, [("main", DP_RESOURCE, held)])
                    for name, held in self._pods.items()
                ]
            )


def _expect_ledger(directory: Path, uuid: str, expected: int, live: int) -> None:
    snap = read_ledger(directory / "cgpu.ledger")
    used = {d.uuid: d.used for d in snap.devices}
    want = {uuid: expected} if expected else {}
    if {k: v for k, v in used.items() if v} != want or len(snap.processes) != live:
        raise LifecycleError(
            f"{directory.name}: ledger {used}, {len(snap.processes)} live process(es); "
            f"expected {want}, {live}"
        )
    slots = sum(p.used.get(uuid, 0) for p in snap.processes)
    if slots != expected:
        raise LifecycleError(f"{directory.name}: slots sum to {slots}, expected {expected}")


def run_process(node: Node, plan: Plan, directory: Path, env: dict[str, str]) -> None:
    """Run the workload in the container's directory; check the ledger while it holds and once
    it is gone."""
    conf = directory / "cgpu.conf"
    (uuid,) = load_config(conf)
    context = load_contexts(conf).get(uuid, CTX_MIB * MIB)
    child_env = {
        **node.env,
        **env,
        "LD_PRELOAD": str(shim_path()),
        "CGPU_LEDGER_DIR": str(directory),  # the host side of /var/run/cgpu
        "CUDA_VISIBLE_DEVICES": uuid,
    }
    proc = subprocess.Popen(
        [str(node.workload), str(plan.mib)], env=child_env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    try:
        line = proc.stdout.readline()
        if line.strip() != b"ready":
            proc.kill()
            _, err = proc.communicate(timeout=30)
            raise LifecycleError(f"{directory.name}: the workload failed: {err.decode()[-500:]}")
        _expect_ledger(directory, uuid, plan.mib * MIB + context, 1)
        time.sleep(plan.hold_s)
        if plan.kill:
            proc.kill()
            proc.wait(timeout=30)
        else:
            proc.stdin.close()
            if proc.wait(timeout=30) != 0:
                raise LifecycleError(f"{directory.name}: the workload exited {proc.returncode}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()
    _expect_ledger(directory, uuid, 0, 0)


class Reaper(threading.Thread):
    """Waits for the device plugin's clean-up to remove the directories of deleted pods, then
    hands their IDs back, so the lifecycles go on meanwhile (the clean-up grace is seconds)."""

    def __init__(self, pool: DevicePool, timeout: float = 60.0) -> None:
        super().__init__(daemon=True)
        self._pool, self._timeout = pool, timeout
        self._pending: list[tuple[Path, list[str], float]] = []
        self._lock = threading.Lock()
        self.failures: list[str] = []
        self.removed = 0

    def add(self, directory: Path, ids: list[str]) -> None:
        """Watch `directory`; its IDs go back to the pool once it is gone."""
        with self._lock:
            self._pending.append((directory, ids, time.monotonic() + self._timeout))

    def pending(self) -> int:
        """Directories not yet removed."""
        with self._lock:
            return len(self._pending)

    def run(self) -> None:
        while True:
            with self._lock:
                pending, self._pending = self._pending, []
            keep = []
            for directory, ids, deadline in pending:
                if not directory.exists():
                    self.removed += 1
                    self._pool.give(ids)
                elif time.monotonic() > deadline:
                    self.failures.append(f"{directory} was not removed after its pod went")
                else:
                    keep.append((directory, ids, deadline))
            with self._lock:
                self._pending[:0] = keep
            time.sleep(0.05)


def device_plugin(node: Node, plan: Plan, pool: DevicePool, pods: PodList, reaper: Reaper) -> None:
    """Allocate through the plugin; removal is the plugin's clean-up once the pod is gone."""
    ids = pool.take(plan.gib, plan.gpu)
    pod = f"dp-{plan.number}"
    directory: Path | None = None
    try:
        pods.set(pod, ids)  # as the kubelet lists a container right after its Allocate
        (answer,) = node.plugin.allocate(ids)
        mount = next(m for m in answer["mounts"] if m["container_path"] == "/var/run/cgpu")
        directory = Path(mount["host_path"])
        run_process(node, plan, directory, answer["envs"])
    finally:
        pods.set(pod, None)
        if directory is None:
            pool.give(ids)
        else:
            reaper.add(directory, ids)


def dra(node: Node, plan: Plan) -> None:
    """A claim allocated by the scheduler's stand-in, prepared, used, unprepared, deleted."""
    name = f"claim-{plan.number}"
    claim = node.api.create(
        "resourceclaims",
        {"metadata": {"name": name, "namespace": NAMESPACE}, "spec": {"devices": {"requests": []}}},
    )
    uid = claim["metadata"]["uid"]
    result = {
        "request": "gpu", "driver": "gpu.cgpu.io", "pool": NODE,
        "device": node.dra_devices[plan.gpu % len(node.dra_devices)],
        "consumedCapacity": {"memory": f"{plan.gib}Gi", "compute": "0"},
        "shareID": f"share-{plan.number}",
    }  # fmt: skip

    def allocate(obj: dict[str, Any]) -> dict[str, Any]:
        obj["status"] = {"allocation": {"devices": {"results": [result]}}}
        return obj

    node.api.update("resourceclaims", name, allocate, NAMESPACE)
    ref = (NAMESPACE, uid, name)
    directory = node.state_dir / "containers" / f"dra-{uid}"
    spec = node.cdi_dir / f"gpu.cgpu.io-claim_{uid}.json"
    try:
        answer = node.peer.prepare(ref)[uid]
        if answer["error"]:
            raise LifecycleError(f"NodePrepareResources {name}: {answer['error']}")
        edits = json.loads(spec.read_text())["devices"][0]["containerEdits"]
        env = dict(e.split("=", 1) for e in edits.get("env", []))
        run_process(node, plan, directory, env)
    finally:
        error = node.peer.unprepare(ref)[uid]
        node.api.delete("resourceclaims", name, NAMESPACE)
    if error:
        raise LifecycleError(f"NodeUnprepareResources {name}: {error}")
    for path in (directory, spec):
        if path.exists():
            raise LifecycleError(f"{path} is left after NodeUnprepareResources")


def _hook(node: Node, state: dict[str, Any], *action: str) -> None:
    run = subprocess.run(
        cgpu_command("hook", "--simulate", "--state-dir", str(node.state_dir), *action),
        input=json.dumps(state).encode(), env=node.env, cwd=node.root, capture_output=True,
        timeout=120, check=False,
    )  # fmt: skip
    if run.returncode != 0:
        raise LifecycleError(f"cgpu hook {' '.join(action)}: {run.stderr.decode()[-500:]}")


def _own_mount_ns(pid: int) -> bool:
    try:
        theirs, ours = os.stat(f"/proc/{pid}/ns/mnt"), os.stat("/proc/self/ns/mnt")
    except FileNotFoundError:
        return False
    return (theirs.st_dev, theirs.st_ino) != (ours.st_dev, ours.st_ino)


def hook(node: Node, plan: Plan) -> None:
    """createRuntime for a stand-in container, the process, the container stops, poststop."""
    cid = f"soak-hook-{plan.number}"
    bundle = node.root / "bundles" / cid
    (bundle / "rootfs").mkdir(parents=True)
    config = {
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs"},
        "process": {"env": [f"CGPU_MEM_LIMIT={plan.gib}GiB", f"NVIDIA_VISIBLE_DEVICES={plan.gpu}"]},
        "annotations": {
            "io.kubernetes.pod.namespace": NAMESPACE,
            "io.kubernetes.pod.name": f"hook-{plan.number}",
            "io.kubernetes.container.name": "main",
        },
    }
    (bundle / "config.json").write_text(json.dumps(config))
    init = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sleep", "600"])
    directory = node.state_dir / "containers" / cid
    try:
        wait_for(lambda: _own_mount_ns(init.pid), "the stand-in container's mount namespace")
        state = {"ociVersion": "1.0.2", "id": cid, "status": "created", "pid": init.pid,
                 "bundle": str(bundle), "annotations": {}}  # fmt: skip
        _hook(node, state)
        run_process(node, plan, directory, dict(e.split("=", 1) for e in config["process"]["env"]))
    finally:
        init.send_signal(signal.SIGKILL if plan.kill else signal.SIGTERM)
        init.wait(timeout=30)
        _hook(node, {"ociVersion": "1.0.2", "id": cid, "status": "stopped", "pid": 0,
                     "bundle": str(bundle), "annotations": {}}, "poststop")  # fmt: skip
        shutil.rmtree(bundle)
    if directory.exists():
        raise LifecycleError(f"{directory} is left after cgpu hook poststop")


def run_one(node: Node, plan: Plan, pool: DevicePool, pods: PodList, reaper: Reaper) -> float:
    """Run one lifecycle; its duration in seconds. Raises LifecycleError."""
    start = time.perf_counter()
    if plan.kind == "device-plugin":
        device_plugin(node, plan, pool, pods, reaper)
    elif plan.kind == "dra":
        dra(node, plan)
    else:
        hook(node, plan)
    return time.perf_counter() - start
