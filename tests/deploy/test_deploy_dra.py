"""The DRA driver's manifests (deploy/dra) and the chart's dra.enabled: valid for releases with
resource.k8s.io/v1 and consumable capacity, least privilege, and command lines cgpu accepts."""

from __future__ import annotations

import pytest
import yaml
from deploy_helpers import (
    REPO,
    argv,
    bound_roles,
    container,
    find,
    helm_template,
    helm_template_error,
    kustomize,
    one,
    parse_cgpu,
    rules,
    run_tool,
)
from kubeschema import validate_for

DRA = REPO / "deploy" / "dra"
CHART_DRA = ("dra.enabled=true", "devicePlugin.enabled=false", "scheduler.enabled=false")
# resource.k8s.io/v1 is GA from 1.34; consumable capacity's fields are in its schema from 1.34.
DRA_VERSIONS = ("1.34.0", "1.37.0")
DRA_RULES = [
    (("resource.k8s.io",), ("resourceclaims",), (), ("get",)),
    (
        ("resource.k8s.io",),
        ("resourceslices",),
        (),
        ("create", "delete", "get", "list", "update", "watch"),
    ),
]


def validate_dra(objs: list[dict]) -> None:
    """Each object valid, strictly, for every release in DRA_VERSIONS."""
    assert objs
    for obj in objs:
        validate_for(obj, DRA_VERSIONS)


def test_plain_manifests_and_example_are_valid() -> None:
    objs = kustomize(DRA)
    validate_dra(objs)
    example = list(yaml.safe_load_all((DRA / "example.yaml").read_text()))
    validate_dra(example)
    template = one(example, "ResourceClaimTemplate", "gpu-4gi")
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request["deviceClassName"] == "gpu.cgpu.io"
    pod = one(example, "Pod", "gpu-4gi")
    assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == "gpu-4gi"


def test_chart_renders_the_driver_in_place_of_plugin_and_extender() -> None:
    objs = helm_template(*CHART_DRA)
    validate_dra(objs)
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert ("DeviceClass", "gpu.cgpu.io") in kinds
    assert ("DaemonSet", "cgpu-dra-driver") in kinds
    assert ("DaemonSet", "cgpu-device-plugin") not in kinds
    assert not find(objs, "Deployment")  # no scheduler, no extender
    assert not any(o["kind"] == "DeviceClass" for o in helm_template())  # off by default


def test_driver_rbac_is_least_privilege_in_chart_and_manifests() -> None:
    for objs in (helm_template(*CHART_DRA), kustomize(DRA)):
        assert bound_roles(objs, "cgpu-dra-driver", "kube-system") == {
            "ClusterRole/cgpu-dra-driver"
        }
        assert rules(one(objs, "ClusterRole", "cgpu-dra-driver")) == DRA_RULES


def test_chart_and_manifests_run_the_same_command_with_host_paths() -> None:
    chart = container(one(helm_template(*CHART_DRA), "DaemonSet", "cgpu-dra-driver"), "dra-driver")
    plain = container(one(kustomize(DRA), "DaemonSet", "cgpu-dra-driver"), "dra-driver")
    assert argv(chart) == argv(plain)
    parse_cgpu(argv(chart)[1:])
    flags = dict(a.removeprefix("--").split("=", 1) for a in argv(chart)[2:])
    mounts = {m["mountPath"] for m in chart["volumeMounts"]}
    assert {flags["state-dir"], flags["cdi-dir"]} <= mounts
    assert {f"{flags['kubelet-dir']}/plugins_registry", f"{flags['kubelet-dir']}/plugins"} <= mounts


@pytest.mark.parametrize(
    "sets", [("dra.enabled=true",), ("dra.enabled=true", "devicePlugin.enabled=false")]
)
def test_dra_with_the_device_plugin_or_extender_is_refused(sets: tuple[str, ...]) -> None:
    assert "dra.enabled replaces the device plugin and the scheduler extender" in (
        helm_template_error(*sets)
    )


def test_helm_lint_is_clean_with_dra() -> None:
    args = ["lint", "--strict", str(REPO / "deploy" / "helm" / "cgpu")]
    for item in CHART_DRA:
        args += ["--set", item]
    done = run_tool("helm", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout, done.stdout


def test_operations_guide_manifests_are_valid() -> None:
    text = (REPO / "docs" / "operations-dra.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]
    objs = [o for block in blocks for o in yaml.safe_load_all(block) if o]
    assert {o["kind"] for o in objs} >= {"ResourceClaimTemplate", "ResourceClaim", "Pod"}
    validate_dra(objs)


def test_migrating_runs_the_driver_beside_the_plugin_on_one_state_directory() -> None:
    sets = ("dra.enabled=true", "dra.migrating=true", "dra.gpus=1", "devicePlugin.gpus=0")
    objs = helm_template(*sets)
    plugin = container(one(objs, "DaemonSet", "cgpu-device-plugin"), "device-plugin")
    driver = container(one(objs, "DaemonSet", "cgpu-dra-driver"), "dra-driver")
    assert "--gpus=0" in argv(plugin) and "--gpus=1" in argv(driver)
    assert parse_cgpu(argv(plugin)[1:]).gpus == frozenset({"0"})
    assert parse_cgpu(argv(driver)[1:]).gpus == frozenset({"1"})
    state = {
        a.split("=", 1)[1] for a in argv(plugin) + argv(driver) if a.startswith("--state-dir=")
    }
    assert len(state) == 1  # one state directory: one owner record per GPU
    assert state <= {m["mountPath"] for m in plugin["volumeMounts"]}
    assert state <= {m["mountPath"] for m in driver["volumeMounts"]}


def test_by_default_each_daemon_may_offer_every_gpu() -> None:
    objs = helm_template("dra.enabled=true", "dra.migrating=true")
    for name, cont in (("cgpu-device-plugin", "device-plugin"), ("cgpu-dra-driver", "dra-driver")):
        args = argv(container(one(objs, "DaemonSet", name), cont))
        assert not [a for a in args if a.startswith("--gpus")]
        assert parse_cgpu(args[1:]).gpus is None


def test_a_malformed_gpu_selection_is_refused() -> None:
    assert "gpus" in helm_template_error("devicePlugin.gpus=../0")
