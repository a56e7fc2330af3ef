"""deploy/helm/cgpu: lint, render, schema validation and the meaning of what it renders."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from deploy_helpers import (
    CHART,
    EXTENDER_RULES,
    NAMESPACE,
    REPO,
    SCHEDULER,
    argv,
    bound_roles,
    cgpu_has,
    container,
    containers,
    find,
    flags,
    helm_template,
    load_all,
    one,
    parse_cgpu,
    pod_spec,
    rules,
    run_tool,
    validate,
)
from scheduler_config import check_scheduler_config

ALL_ON = (
    "hooks.enabled=true",
    "exporter.serviceMonitor.enabled=true",
    "exporter.prometheusRule.enabled=true",
)
# Value sets that between them render every template and every branch.
VARIANTS = {
    "default": (),
    "all-parts-profile": ALL_ON,
    "all-parts-extender": (*ALL_ON, "scheduler.mode=extender"),
    "extender-clusterip": (
        "scheduler.mode=extender",
        "scheduler.extender.service.type=ClusterIP",
        "scheduler.extender.urlPrefix=http://10.96.0.50:32766/gpushare-scheduler",
    ),
    "volcano": ("resourceName=volcano.sh/gpu-memory", "memoryUnit=MiB", "scheduler.enabled=false"),
    "no-leader-election": ("scheduler.profile.leaderElect=false",),
}
NAMESPACED = {
    "ServiceAccount", "ConfigMap", "Service", "DaemonSet", "Deployment", "Role", "RoleBinding",
    "ServiceMonitor", "PrometheusRule",
}  # fmt: skip


def _scheduler_config(objs: list[dict]) -> dict:
    cm = one(objs, "ConfigMap", "cgpu-scheduler-config")
    cfg = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    check_scheduler_config(cfg)
    return cfg


@pytest.mark.parametrize("sets", [(), (*ALL_ON, "scheduler.mode=extender")], ids=["default", "all"])
def test_helm_lint_is_clean(sets: tuple[str, ...]) -> None:
    args = ["lint", "--strict", str(CHART)]
    for item in sets:
        args += ["--set", item]
    done = run_tool("helm", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout


@pytest.mark.parametrize("variant", VARIANTS, ids=list(VARIANTS))
def test_every_rendered_object_is_valid(variant: str) -> None:
    objs = helm_template(*VARIANTS[variant])
    validate(objs)
    names = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert len(names) == len(set(names)), "two objects of one kind share a name"
    for obj in objs:
        meta = obj["metadata"]
        if obj["kind"] in NAMESPACED:
            # Only the authentication reader binding must live in kube-system itself.
            assert meta.get("namespace") == NAMESPACE, f"{obj['kind']}/{meta['name']}"
        else:
            assert "namespace" not in meta, f"{obj['kind']}/{meta['name']} is cluster-scoped"
        assert meta["labels"]["app.kubernetes.io/part-of"] == "cgpu"
    for obj in find(objs, "ConfigMap"):
        check_scheduler_config(yaml.safe_load(obj["data"]["scheduler-config.yaml"]))


def test_release_namespace_is_used_everywhere_but_the_auth_reader() -> None:
    objs = helm_template(*ALL_ON, namespace="gpu-system")
    for obj in objs:
        if obj["kind"] not in NAMESPACED:
            continue
        want = (
            "kube-system"
            if obj["metadata"]["name"].endswith(":authentication-reader")
            else "gpu-system"
        )
        assert obj["metadata"]["namespace"] == want, obj["metadata"]["name"]
    cfg = _scheduler_config(objs)
    assert cfg["leaderElection"]["resourceNamespace"] == "gpu-system"
    lease = one(objs, "Role", "cgpu-scheduler:leader-election")
    assert lease["metadata"]["namespace"] == "gpu-system"


def test_default_install_has_every_default_part() -> None:
    objs = helm_template()
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert {
        ("DaemonSet", "cgpu-device-plugin"),
        ("DaemonSet", "cgpu-compute-arbiter"),
        ("DaemonSet", "cgpu-exporter"),
        ("Service", "cgpu-exporter"),
        ("Deployment", "cgpu-scheduler"),
        ("ConfigMap", "cgpu-scheduler-config"),
    } <= kinds
    assert not find(objs, "ServiceMonitor") and not find(objs, "PrometheusRule")
    assert not find(objs, "DaemonSet", "cgpu-hook-installer"), "the hook installer is opt-in"


def test_scheduler_config_manages_compute_only_when_the_chart_advertises_it() -> None:
    cfg = _scheduler_config(helm_template("computeResourceName="))
    (ext,) = cfg["extenders"]
    assert ext["managedResources"] == [{"name": "aliyun.com/gpu-mem", "ignoredByScheduler": False}]


def test_profile_mode_scheduler_config_and_sidecar_agree() -> None:
    objs = helm_template()
    cfg = _scheduler_config(objs)
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["cgpu-scheduler"]
    (ext,) = cfg["extenders"]
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"]) == (
        "filter",
        "prioritize",
        "bind",
    )
    assert ext["nodeCacheCapable"] is True and ext["enableHTTPS"] is False
    assert ext["managedResources"] == [
        {"name": "aliyun.com/gpu-mem", "ignoredByScheduler": False},
        {"name": "aliyun.com/gpu-core.percentage", "ignoredByScheduler": False},
    ]

    deploy = one(objs, "Deployment", "cgpu-scheduler")
    sidecar = flags(container(deploy, "extender"))
    assert ext["urlPrefix"] == f"http://{sidecar['address']}:{sidecar['port']}/gpushare-scheduler"
    assert sidecar["address"] == "127.0.0.1"
    assert (sidecar["node-policy"], sidecar["gpu-policy"]) == ("binpack", "binpack")

    scheduler = container(deploy, "kube-scheduler")
    mount = next(m for m in scheduler["volumeMounts"] if m["name"] == "config")
    assert f"--config={mount['mountPath']}/scheduler-config.yaml" in argv(scheduler)
    volume = next(v for v in pod_spec(deploy)["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == "cgpu-scheduler-config"

    # A changed configuration rolls the scheduler.
    other = helm_template("scheduler.weight=3")
    annotation = "checksum/config"
    before = deploy["spec"]["template"]["metadata"]["annotations"][annotation]
    after = one(other, "Deployment", "cgpu-scheduler")["spec"]["template"]["metadata"]
    assert after["annotations"][annotation] != before


def test_profile_mode_rbac_is_the_scheduler_roles_plus_least_privilege() -> None:
    objs = helm_template()
    assert pod_spec(one(objs, "Deployment", "cgpu-scheduler"))["serviceAccountName"] == (
        "cgpu-scheduler"
    )
    assert bound_roles(objs, "cgpu-scheduler") == {
        "ClusterRole/cgpu-scheduler-extender",
        "ClusterRole/system:kube-scheduler",
        "ClusterRole/system:volume-scheduler",
        "Role/kube-system/extension-apiserver-authentication-reader",
        "Role/kube-system/cgpu-scheduler:leader-election",
    }
    assert rules(one(objs, "ClusterRole", "cgpu-scheduler-extender")) == EXTENDER_RULES
    lease = rules(one(objs, "Role", "cgpu-scheduler:leader-election"))
    assert lease == [
        (("coordination.k8s.io",), ("leases",), (), ("create",)),
        (("coordination.k8s.io",), ("leases",), ("cgpu-scheduler",), ("get", "update")),
    ]
    assert _scheduler_config(objs)["leaderElection"]["resourceName"] == "cgpu-scheduler"


def test_no_role_grants_wildcards_or_secrets() -> None:
    objs = helm_template(*ALL_ON) + helm_template(*ALL_ON, "scheduler.mode=extender")
    for role in find(objs, "ClusterRole") + find(objs, "Role"):
        for api_groups, resources, _names, verbs in rules(role):
            assert "*" not in api_groups + resources + verbs, role["metadata"]["name"]
            assert "secrets" not in resources, role["metadata"]["name"]
    dp = one(helm_template(), "ClusterRole", "cgpu-device-plugin")
    plain = load_all((REPO / "deploy" / "deviceplugin" / "rbac.yaml").read_text())
    assert rules(dp) == rules(one(plain, "ClusterRole", "cgpu-device-plugin"))
    assert rules(dp) == [
        (("",), ("nodes/status",), (), ("patch",)),
        (("",), ("pods",), (), ("get", "list", "patch", "watch")),
    ]


def test_extender_mode_renders_the_extender_service_and_control_plane_config() -> None:
    objs = helm_template("scheduler.mode=extender")
    assert not find(objs, "Deployment", "cgpu-scheduler"), "no second scheduler in extender mode"
    deploy = one(objs, "Deployment", "cgpu-scheduler-extender")
    assert deploy["spec"]["strategy"]["type"] == "Recreate"
    extender = container(deploy, "extender")
    assert flags(extender)["address"] == "0.0.0.0"
    svc = one(objs, "Service", "cgpu-scheduler-extender")
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    (port,) = svc["spec"]["ports"]
    assert port["targetPort"] == extender["ports"][0]["name"]
    assert (svc["spec"]["type"], port["nodePort"]) == ("NodePort", 32766)

    cfg = _scheduler_config(objs)
    assert "profiles" not in cfg, "the control plane keeps its default-scheduler profile"
    assert cfg["clientConnection"]["kubeconfig"] == "/etc/kubernetes/scheduler.conf"
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == "http://127.0.0.1:32766/gpushare-scheduler"
    plain = yaml.safe_load((SCHEDULER / "extender" / "scheduler-config.yaml").read_text())
    assert cfg == plain, "the chart and deploy/scheduler/extender must give the same config"

    assert bound_roles(objs, "cgpu-scheduler-extender") == {"ClusterRole/cgpu-scheduler-extender"}
    assert not find(objs, "Role"), "the extender alone needs no lease"


def test_profile_mode_matches_the_plain_manifests() -> None:
    cfg = _scheduler_config(helm_template())
    plain = yaml.safe_load((SCHEDULER / "profile" / "scheduler-config.yaml").read_text())
    assert cfg == plain


def test_exporter_monitoring_objects() -> None:
    objs = helm_template(*ALL_ON)
    svc = one(objs, "Service", "cgpu-exporter")
    ds = one(objs, "DaemonSet", "cgpu-exporter")
    assert svc["spec"]["selector"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    monitor = one(objs, "ServiceMonitor", "cgpu-exporter")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == svc["spec"]["ports"][0]["name"]
    assert endpoint["honorLabels"] is True
    # The same rules as the plain alerts file (files/alerts.yaml is its copy).
    rule = one(objs, "PrometheusRule", "cgpu")
    plain = yaml.safe_load((REPO / "deploy" / "prometheus" / "alerts.yaml").read_text())
    assert rule["spec"] == plain
    # The scrape configs and alerts select app.kubernetes.io/name=cgpu-exporter.
    assert ds["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "cgpu-exporter"


def test_hook_installer_runs_hook_install_with_the_host_paths(tmp_path: Path) -> None:
    objs = helm_template("hooks.enabled=true", "hooks.cgpuPath=/opt/cgpu/bin/cgpu")
    ds = one(objs, "DaemonSet", "cgpu-hook-installer")
    spec = pod_spec(ds)
    assert spec["hostPID"] is True, "sweep must see the host's processes"
    install = container(ds, "install")
    mounts = {m["mountPath"] for m in install["volumeMounts"]}
    hooks_dir = flags(install)["dir"]
    assert hooks_dir == "/usr/share/containers/oci/hooks.d" and hooks_dir in mounts
    host_paths = {v["hostPath"]["path"] for v in spec["volumes"]}
    assert hooks_dir in host_paths

    # The rendered command, run with the real cgpu into a temporary hooks.d, writes a hook
    # that starts the host's cgpu with the chart's state dir.
    cmd = [a if not a.startswith("--dir=") else f"--dir={tmp_path}" for a in argv(install)]
    parse_cgpu(cmd[1:])
    from cgpu.cli import main

    assert main(cmd[1:]) == 0
    entry = json.loads((tmp_path / "cgpu.json").read_text())
    assert entry["hook"]["path"] == "/opt/cgpu/bin/cgpu"
    assert entry["hook"]["args"][1:] == ["hook", "--state-dir", "/var/lib/cgpu"]
    assert entry["stages"] == ["createRuntime", "poststop"]

    sweep = container(ds, "sweep")
    script = argv(sweep)[-1]
    assert re.search(r"cgpu hook sweep --state-dir \"\$STATE_DIR\"", script)
    env = {e["name"]: e["value"] for e in sweep["env"]}
    parse_cgpu(["hook", "sweep", "--state-dir", env["STATE_DIR"]])
    assert int(env["INTERVAL"]) == 300
    assert {m["mountPath"] for m in sweep["volumeMounts"]} == {env["STATE_DIR"]}


def test_every_cgpu_command_line_is_accepted_by_cgpu() -> None:
    """Each container that runs cgpu passes flags the installed cgpu knows."""
    objs = helm_template(*ALL_ON) + helm_template(*ALL_ON, "scheduler.mode=extender")
    seen = set()
    for workload in find(objs, "DaemonSet") + find(objs, "Deployment"):
        for cont in containers(workload):
            cmd = argv(cont)
            if cmd[0] != "cgpu":
                continue
            seen.add(cmd[1])
            if cmd[1] == "scheduler-extender" and not cgpu_has("scheduler-extender"):
                continue  # checked by the test below once the subcommand exists
            parse_cgpu(cmd[1:])
    assert seen == {"device-plugin", "compute-arbiter", "exporter", "hook", "scheduler-extender"}


def test_scheduler_extender_command_line_is_accepted_by_cgpu() -> None:
    if not cgpu_has("scheduler-extender"):
        pytest.skip("this cgpu build has no scheduler-extender subcommand yet")
    for mode in ("profile", "extender"):
        objs = helm_template(f"scheduler.mode={mode}", "scheduler.nodePolicy=spread")
        for workload in find(objs, "Deployment"):
            cont = container(workload, "extender")
            parse_cgpu(argv(cont)[1:])


def test_hook_sweep_loop_sweeps_and_stops_on_sigterm(tmp_path: Path) -> None:
    """The rendered sweep container's script, run by sh as in the pod, with the real cgpu."""
    from cgpu.core.containers import containers_root, create_container_dir
    from cgpu.core.procfs import start_time

    objs = helm_template("hooks.enabled=true", "hooks.sweepIntervalSeconds=10")
    sweep = container(one(objs, "DaemonSet", "cgpu-hook-installer"), "sweep")
    limits = {"GPU-5eed0000-0000-4000-8000-000000000000": 1 << 30}
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid is free now
    me = os.getpid()
    for key, pid, started in (("dead", dead.pid, 1), ("live", me, start_time(me))):
        meta = {"source": "hook", "init_pid": pid, "init_start_time": started}
        create_container_dir(tmp_path, key, limits, meta)
    env = {e["name"]: e["value"] for e in sweep["env"]}
    env.update(STATE_DIR=str(tmp_path), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    proc = subprocess.Popen(argv(sweep), env={**os.environ, **env})
    try:
        deadline = time.monotonic() + 30
        while (containers_root(tmp_path) / "dead").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not (containers_root(tmp_path) / "dead").exists(), "the loop did not sweep"
        assert (containers_root(tmp_path) / "live").exists()
        time.sleep(0.5)  # now in `sleep 10 & wait`
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=3) == 0, (
            "the trap must end sh with 0 at once (as PID 1, sh ignores SIGTERM without one)"
        )
    finally:
        proc.kill()
        proc.wait()
