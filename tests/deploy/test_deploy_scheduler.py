"""deploy/scheduler: the plain manifests and kustomizations of both ways to run the extender."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from deploy_helpers import (
    EXTENDER_RULES,
    SCHEDULER,
    argv,
    bound_roles,
    container,
    find,
    flags,
    kustomize,
    load_all,
    one,
    parse_cgpu,
    pod_spec,
    rules,
    validate,
)
from scheduler_config import check_scheduler_config

PROFILE = SCHEDULER / "profile"
EXTENDER = SCHEDULER / "extender"
OBJECT_FILES = [
    SCHEDULER / "base" / "clusterrole.yaml",
    PROFILE / "rbac.yaml",
    PROFILE / "deployment.yaml",
    EXTENDER / "rbac.yaml",
    EXTENDER / "deployment.yaml",
]
CONFIG_FILES = [PROFILE / "scheduler-config.yaml", EXTENDER / "scheduler-config.yaml"]


def _load(path: Path) -> list[dict]:
    return load_all(path.read_text())


def test_every_yaml_file_is_covered() -> None:
    """No YAML file in deploy/scheduler escapes the checks below."""
    on_disk = {p for p in SCHEDULER.rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert on_disk == set(OBJECT_FILES) | set(CONFIG_FILES)


@pytest.mark.parametrize("path", OBJECT_FILES, ids=lambda p: str(p.relative_to(SCHEDULER)))
def test_plain_objects_are_valid_kubernetes(path: Path) -> None:
    objs = _load(path)
    assert objs
    validate(objs)


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: str(p.relative_to(SCHEDULER)))
def test_scheduler_configs_have_the_extender(path: Path) -> None:
    (cfg,) = _load(path)
    check_scheduler_config(cfg)
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == "http://127.0.0.1:32766/gpushare-scheduler"
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"]) == (
        "filter",
        "prioritize",
        "bind",
    )
    assert ext["enableHTTPS"] is False
    assert ext["nodeCacheCapable"] is True
    assert ext["managedResources"] == [
        {"name": "aliyun.com/gpu-mem", "ignoredByScheduler": False},
        {"name": "aliyun.com/gpu-core.percentage", "ignoredByScheduler": False},
    ]
    assert ext.get("ignorable", False) is False, "a GPU pod must not be placed without the extender"


def test_profile_config_names_its_own_profile_and_lease() -> None:
    cfg = yaml.safe_load((PROFILE / "scheduler-config.yaml").read_text())
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["cgpu-scheduler"]
    election = cfg["leaderElection"]
    assert election["leaderElect"] is True
    assert (election["resourceNamespace"], election["resourceName"]) == (
        "kube-system",
        "cgpu-scheduler",
    )


def test_extender_config_uses_the_control_plane_kubeconfig() -> None:
    cfg = yaml.safe_load((EXTENDER / "scheduler-config.yaml").read_text())
    assert cfg["clientConnection"]["kubeconfig"] == "/etc/kubernetes/scheduler.conf"
    assert "profiles" not in cfg, "the default profile must stay default-scheduler"


def test_checker_rejects_what_kube_scheduler_rejects() -> None:
    """The config checker is strict: a misspelt field or a second binder fails it."""
    cfg = yaml.safe_load((PROFILE / "scheduler-config.yaml").read_text())
    cfg["extenders"][0]["nodeCachedCapable"] = True
    with pytest.raises(AssertionError, match="nodeCachedCapable"):
        check_scheduler_config(cfg)
    cfg = yaml.safe_load((PROFILE / "scheduler-config.yaml").read_text())
    cfg["extenders"].append(dict(cfg["extenders"][0]))
    with pytest.raises(AssertionError, match="only one extender may bind"):
        check_scheduler_config(cfg)
    cfg = yaml.safe_load((PROFILE / "scheduler-config.yaml").read_text())
    cfg["extenders"][0]["enableHTTPS"] = "false"
    with pytest.raises(AssertionError, match="boolean"):
        check_scheduler_config(cfg)


def test_extender_role_is_least_privilege() -> None:
    (role,) = _load(SCHEDULER / "base" / "clusterrole.yaml")
    assert role["kind"] == "ClusterRole"
    assert rules(role) == EXTENDER_RULES


def test_profile_kustomization_builds_a_working_second_scheduler() -> None:
    objs = kustomize(PROFILE)
    validate(objs)
    deploy = one(objs, "Deployment", "cgpu-scheduler")
    spec = pod_spec(deploy)
    assert spec["serviceAccountName"] == "cgpu-scheduler"

    # The generated ConfigMap holds scheduler-config.yaml and is the one the pod mounts.
    (cm,) = find(objs, "ConfigMap")
    assert cm["metadata"]["name"].startswith("cgpu-scheduler-config-")
    assert yaml.safe_load(cm["data"]["config.yaml"]) == yaml.safe_load(
        (PROFILE / "scheduler-config.yaml").read_text()
    )
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["config"]["configMap"]["name"] == cm["metadata"]["name"]

    scheduler = container(deploy, "kube-scheduler")
    mount = next(m for m in scheduler["volumeMounts"] if m["name"] == "config")
    assert f"--config={mount['mountPath']}/config.yaml" in argv(scheduler)

    # The sidecar listens on localhost, where the config's urlPrefix points.
    extender = container(deploy, "extender")
    assert flags(extender)["address"] == "127.0.0.1"
    assert flags(extender)["port"] == "32766"
    assert "ports" not in extender, "the sidecar must not be exposed on the pod network"

    assert bound_roles(objs, "cgpu-scheduler") == {
        "ClusterRole/cgpu-scheduler-extender",
        "ClusterRole/system:kube-scheduler",
        "ClusterRole/system:volume-scheduler",
        "Role/kube-system/extension-apiserver-authentication-reader",
        "Role/kube-system/cgpu-scheduler:leader-election",
    }
    lease_role = one(objs, "Role", "cgpu-scheduler:leader-election")
    assert rules(lease_role) == [
        (("coordination.k8s.io",), ("leases",), (), ("create",)),
        (("coordination.k8s.io",), ("leases",), ("cgpu-scheduler",), ("get", "update")),
    ]


def test_extender_kustomization_builds_the_extender_and_its_service() -> None:
    objs = kustomize(EXTENDER)
    validate(objs)
    deploy = one(objs, "Deployment", "cgpu-scheduler-extender")
    assert deploy["spec"]["replicas"] == 1
    assert deploy["spec"]["strategy"]["type"] == "Recreate"
    spec = pod_spec(deploy)
    assert spec["serviceAccountName"] == "cgpu-scheduler-extender"
    extender = container(deploy, "extender")
    port = extender["ports"][0]
    assert int(flags(extender)["port"]) == port["containerPort"]

    svc = one(objs, "Service", "cgpu-scheduler-extender")
    assert (
        svc["spec"]["selector"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    )
    (svc_port,) = svc["spec"]["ports"]
    assert svc_port["targetPort"] == port["name"]
    assert (svc["spec"]["type"], svc_port["nodePort"]) == ("NodePort", 32766)

    assert bound_roles(objs, "cgpu-scheduler-extender") == {"ClusterRole/cgpu-scheduler-extender"}
    assert rules(one(objs, "ClusterRole", "cgpu-scheduler-extender")) == EXTENDER_RULES


@pytest.mark.parametrize("directory", [PROFILE, EXTENDER], ids=["profile", "extender"])
def test_extender_command_line_is_valid_for_cgpu(directory: Path) -> None:
    """The installed cgpu accepts the extender's flags (once it has the subcommand)."""
    from deploy_helpers import cgpu_has

    if not cgpu_has("scheduler-extender"):
        pytest.skip("this cgpu build has no scheduler-extender subcommand yet")
    deploy = find(kustomize(directory), "Deployment")[0]
    parse_cgpu(argv(container(deploy, "extender"))[1:])


def test_operations_doc_examples_are_valid() -> None:
    """The objects shown in docs/operations-scheduler.md are valid, and the demo pod opts in."""
    doc = (SCHEDULER.parents[1] / "docs" / "operations-scheduler.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", doc, flags=re.S)]
    objects = [b for b in blocks if isinstance(b, dict) and "kind" in b]
    validate(objects)
    (pod,) = find(objects, "Pod")
    assert pod["spec"]["schedulerName"] == "cgpu-scheduler"
    assert "aliyun.com/gpu-mem" in pod["spec"]["containers"][0]["resources"]["limits"]
