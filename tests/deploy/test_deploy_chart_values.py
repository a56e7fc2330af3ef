"""deploy/helm/cgpu: values reach the objects they configure, and bad values fail the install."""

from __future__ import annotations

import pytest
import yaml
from deploy_helpers import (
    argv,
    container,
    find,
    flags,
    helm_template,
    helm_template_error,
    one,
    parse_cgpu,
    pod_spec,
    validate,
)
from scheduler_config import check_scheduler_config


def _config(objs: list[dict]) -> dict:
    cfg = yaml.safe_load(
        one(objs, "ConfigMap", "cgpu-scheduler-config")["data"]["scheduler-config.yaml"]
    )
    check_scheduler_config(cfg)
    return cfg


def test_resource_name_and_unit_reach_the_device_plugin_and_exporter() -> None:
    default = helm_template()
    dp = flags(container(one(default, "DaemonSet", "cgpu-device-plugin"), "device-plugin"))
    assert (dp["resource-name"], dp["memory-unit"]) == ("aliyun.com/gpu-mem", "GiB")

    objs = helm_template(
        "resourceName=volcano.sh/gpu-memory", "memoryUnit=MiB", "scheduler.enabled=false"
    )
    validate(objs)
    dp = flags(container(one(objs, "DaemonSet", "cgpu-device-plugin"), "device-plugin"))
    assert (dp["resource-name"], dp["memory-unit"]) == ("volcano.sh/gpu-memory", "MiB")
    exporter = flags(container(one(objs, "DaemonSet", "cgpu-exporter"), "exporter"))
    assert exporter["resource-name"] == "volcano.sh/gpu-memory"
    assert not find(objs, "Deployment") and not find(objs, "ConfigMap"), "Volcano schedules"


def test_mib_units_with_the_gpushare_resource() -> None:
    objs = helm_template("memoryUnit=MiB")
    dp = flags(container(one(objs, "DaemonSet", "cgpu-device-plugin"), "device-plugin"))
    assert dp["memory-unit"] == "MiB"


def test_policies_reach_the_extender() -> None:
    for mode, name in (("profile", "cgpu-scheduler"), ("extender", "cgpu-scheduler-extender")):
        objs = helm_template(
            f"scheduler.mode={mode}", "scheduler.nodePolicy=spread", "scheduler.gpuPolicy=spread"
        )
        ext = flags(container(one(objs, "Deployment", name), "extender"))
        assert (ext["node-policy"], ext["gpu-policy"]) == ("spread", "spread")


@pytest.mark.parametrize("mode", ["profile", "extender"])
def test_the_compute_ceiling_is_counted_only_where_no_arbiter_runs(mode: str) -> None:
    """auto (the default): the arbiter makes pods without a compute limit best effort, so the
    extender ignores them; without the arbiter it counts their ceiling. An explicit value wins."""
    name = "cgpu-scheduler" if mode == "profile" else "cgpu-scheduler-extender"
    cases = [
        ((), "ignore"),
        (("computeArbiter.enabled=false",), "count"),
        (("scheduler.unlimitedNeighbours=count",), "count"),
        (("computeArbiter.enabled=false", "scheduler.unlimitedNeighbours=ignore"), "ignore"),
    ]
    for sets, expected in cases:
        objs = helm_template(f"scheduler.mode={mode}", *sets)
        ext = flags(container(one(objs, "Deployment", name), "extender"))
        assert ext["unlimited-neighbours"] == expected, sets


def test_scheduler_knobs_reach_the_scheduler_config() -> None:
    objs = helm_template(
        "scheduler.port=40000",
        "scheduler.weight=5",
        "scheduler.httpTimeout=30s",
        "scheduler.profile.schedulerName=gpu-share",
    )
    cfg = _config(objs)
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == "http://127.0.0.1:40000/gpushare-scheduler"
    assert (ext["weight"], ext["httpTimeout"]) == (5, "30s")
    assert cfg["profiles"] == [{"schedulerName": "gpu-share"}]
    assert cfg["leaderElection"]["resourceName"] == "gpu-share"
    lease = one(objs, "Role", "cgpu-scheduler:leader-election")
    assert lease["rules"][1]["resourceNames"] == ["gpu-share"]
    sidecar = flags(container(one(objs, "Deployment", "cgpu-scheduler"), "extender"))
    assert sidecar["port"] == "40000"


def test_extender_mode_service_type_and_url() -> None:
    objs = helm_template("scheduler.mode=extender", "scheduler.extender.service.nodePort=31000")
    assert _config(objs)["extenders"][0]["urlPrefix"] == "http://127.0.0.1:31000/gpushare-scheduler"
    svc = one(objs, "Service", "cgpu-scheduler-extender")
    assert svc["spec"]["ports"][0]["nodePort"] == 31000

    url = "http://10.96.0.50:32766/gpushare-scheduler"
    objs = helm_template(
        "scheduler.mode=extender",
        "scheduler.extender.service.type=ClusterIP",
        f"scheduler.extender.urlPrefix={url}",
    )
    svc = one(objs, "Service", "cgpu-scheduler-extender")
    assert svc["spec"]["type"] == "ClusterIP" and "nodePort" not in svc["spec"]["ports"][0]
    assert _config(objs)["extenders"][0]["urlPrefix"] == url


def test_image_node_selector_and_tolerations_reach_the_node_parts() -> None:
    objs = helm_template(
        "image.repository=example.org/gpu/cgpu",
        "image.tag=1.2.3",
        "nodeSelector.pool=gpu",
        "tolerations[0].key=dedicated",
        "tolerations[0].operator=Exists",
        "runtimeClassName=nvidia",
        "hooks.enabled=true",
    )
    for name in (
        "cgpu-device-plugin",
        "cgpu-compute-arbiter",
        "cgpu-exporter",
        "cgpu-hook-installer",
    ):
        ds = one(objs, "DaemonSet", name)
        spec = pod_spec(ds)
        assert spec["nodeSelector"] == {"gpushare": "true", "pool": "gpu"}, name
        assert spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}], name
        assert spec["runtimeClassName"] == "nvidia"
        for cont in spec.get("initContainers", []) + spec["containers"]:
            assert cont["image"] == "example.org/gpu/cgpu:1.2.3"
    sched = one(objs, "Deployment", "cgpu-scheduler")
    assert container(sched, "extender")["image"] == "example.org/gpu/cgpu:1.2.3"
    assert container(sched, "kube-scheduler")["image"].startswith("registry.k8s.io/kube-scheduler:")


def test_default_image_tag_is_the_app_version() -> None:
    chart = yaml.safe_load((__import__("deploy_helpers").CHART / "Chart.yaml").read_text())
    ds = one(helm_template(), "DaemonSet", "cgpu-device-plugin")
    assert (
        container(ds, "device-plugin")["image"]
        == f"registry.example.com/cgpu:{chart['appVersion']}"
    )


def test_state_dir_is_the_same_path_inside_and_on_the_host() -> None:
    """Allocate's mounts are host paths: the plugin must see the state dir at the host path."""
    objs = helm_template("stateDir=/data/cgpu", "kubeletRootDir=/data/kubelet")
    for name, cname in (("cgpu-device-plugin", "device-plugin"), ("cgpu-exporter", "exporter")):
        ds = one(objs, "DaemonSet", name)
        cont = container(ds, cname)
        assert flags(cont)["state-dir"] == "/data/cgpu"
        assert flags(cont)["pod-resources-socket"] == "/data/kubelet/pod-resources/kubelet.sock"
        volumes = {v["name"]: v["hostPath"]["path"] for v in pod_spec(ds)["volumes"]}
        for mount in cont["volumeMounts"]:
            assert volumes[mount["name"]] == mount["mountPath"], (name, mount["name"])
    dp = flags(container(one(objs, "DaemonSet", "cgpu-device-plugin"), "device-plugin"))
    assert dp["kubelet-dir"] == "/data/kubelet/device-plugins"
    arbiter = one(objs, "DaemonSet", "cgpu-compute-arbiter")
    cont = container(arbiter, "compute-arbiter")
    assert flags(cont)["containers"] == "/data/cgpu/containers"
    assert flags(cont)["status"] == "/data/cgpu/compute-arbiter.json"
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod_spec(arbiter)["volumes"]}
    assert [(volumes[m["name"]], m["mountPath"]) for m in cont["volumeMounts"]] == [
        ("/data/cgpu", "/data/cgpu")
    ]


def test_parts_can_be_turned_off() -> None:
    objs = helm_template(
        "devicePlugin.enabled=false",
        "computeArbiter.enabled=false",
        "exporter.enabled=false",
        "scheduler.enabled=false",
    )
    assert objs == []


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("memoryUnit=KiB",), "memoryUnit"),
        (("resourceName=nvidia.com/gpu",), "resourceName"),
        (("scheduler.mode=sidecar",), "mode"),
        (("scheduler.nodePolicy=random",), "nodePolicy"),
        (("scheduler.unlimitedNeighbours=sometimes",), "unlimitedNeighbours"),
        (("scheduler.port=70000",), "port"),
        (("scheduler.httpTimeout=ten",), "httpTimeout"),
        (("stateDir=relative/dir",), "stateDir"),
        (("scheduler.weight=0",), "weight"),
        (("computeArbiter.quantumMs=0",), "quantumMs"),
        (("computeArbiter.extraArgs=--no-nvml",), "extraArgs"),
        (("schedulr.enabled=false",), "schedulr"),
        (("resourceName=volcano.sh/gpu-memory",), "set memoryUnit=MiB"),
        (
            ("resourceName=volcano.sh/gpu-memory", "memoryUnit=MiB"),
            "set scheduler.enabled=false",
        ),
        (("scheduler.mode=extender", "scheduler.replicas=2"), "one extender"),
        (
            ("scheduler.mode=extender", "scheduler.extender.service.type=ClusterIP"),
            "scheduler.extender.urlPrefix is required",
        ),
    ],
)
def test_bad_values_fail_with_a_clear_message(sets: tuple[str, ...], message: str) -> None:
    assert message in helm_template_error(*sets)


def test_two_scheduler_replicas_in_profile_mode_use_leader_election() -> None:
    objs = helm_template("scheduler.replicas=2")
    assert one(objs, "Deployment", "cgpu-scheduler")["spec"]["replicas"] == 2
    assert _config(objs)["leaderElection"]["leaderElect"] is True


def test_priority_classes_default_to_system_and_can_be_replaced() -> None:
    """system-* classes are admitted only in kube-system: other namespaces need their own."""
    objs = helm_template()
    for name in ("cgpu-device-plugin", "cgpu-compute-arbiter", "cgpu-exporter"):
        assert pod_spec(one(objs, "DaemonSet", name))["priorityClassName"] == "system-node-critical"
    sched = pod_spec(one(objs, "Deployment", "cgpu-scheduler"))
    assert sched["priorityClassName"] == "system-cluster-critical"

    objs = helm_template(
        "priorityClassName=gpu-infra", "scheduler.priorityClassName=", namespace="gpu-system"
    )
    validate(objs)
    assert pod_spec(one(objs, "DaemonSet", "cgpu-exporter"))["priorityClassName"] == "gpu-infra"
    assert "priorityClassName" not in pod_spec(one(objs, "Deployment", "cgpu-scheduler"))


def test_exporter_host_view_and_enforcement_get_what_they_need() -> None:
    """The host view needs the host's pids and SYS_PTRACE; --enforce also needs KILL; without the
    host view the exporter runs in its own pid namespace with no capability at all."""

    def exporter(*sets: str) -> tuple[dict, dict, list[str]]:
        objs = helm_template(*sets)
        validate(objs)
        daemonset = one(objs, "DaemonSet", "cgpu-exporter")
        cont = container(daemonset, "exporter")
        parse_cgpu(argv(cont)[1:])
        return pod_spec(daemonset), cont, argv(cont)

    spec, cont, args = exporter()
    assert spec.get("hostPID") is True
    assert cont["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE"]}
    assert "--enforce" not in args and "--no-host-view" not in args

    spec, cont, args = exporter("exporter.enforce.enabled=true", "exporter.enforce.graceSeconds=60")
    assert cont["securityContext"]["capabilities"]["add"] == ["SYS_PTRACE", "KILL"]
    assert "--enforce" in args and "--enforce-grace=60" in args

    spec, cont, args = exporter("exporter.hostView=false")
    assert "hostPID" not in spec
    assert cont["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "--no-host-view" in args
