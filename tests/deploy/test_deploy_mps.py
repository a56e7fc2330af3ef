"""MPS mode and the compute resource in the deployment files: the Helm chart and deploy/mps."""

from __future__ import annotations

import pytest
from deploy_helpers import (
    CHART,
    REPO,
    argv,
    container,
    find,
    flags,
    helm_template,
    helm_template_error,
    kustomize,
    one,
    parse_cgpu,
    pod_spec,
    run_tool,
    validate,
)

MPS_ON = ("mps.enabled=true", "isolation=mps")


def _mounts(cont: dict) -> dict[str, dict]:
    return {m["mountPath"]: m for m in cont.get("volumeMounts", [])}


def _host_paths(obj: dict) -> dict[str, str]:
    return {v["name"]: v["hostPath"]["path"] for v in pod_spec(obj)["volumes"] if "hostPath" in v}


def test_helm_lint_is_clean_in_mps_mode() -> None:
    args = ["lint", "--strict", str(CHART)]
    for item in MPS_ON:
        args += ["--set", item]
    done = run_tool("helm", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout, done.stdout


def check_mps_objects(objs: list[dict], root: str = "/run/cgpu/mps") -> None:
    """The daemon and the plugin agree on the root, and every command line parses."""
    validate(objs)
    daemon = next(
        o for o in find(objs, "DaemonSet") if o["metadata"]["name"].endswith("mps-daemon")
    )
    cont = container(daemon, "mps-daemon")
    parse_cgpu(argv(cont)[1:])
    probe = cont["readinessProbe"]["exec"]["command"]
    assert probe[:3] == ["cgpu", "mps-daemon", "--check"]
    parse_cgpu(probe[1:])
    assert flags(cont)["root"] == root
    mounts, hosts = _mounts(cont), _host_paths(daemon)
    assert hosts[mounts[root]["name"]] == root  # the same path inside and on the host
    assert hosts[mounts["/dev/shm"]["name"]] == f"{root}/shm"
    env = {e["name"]: e.get("value") for e in cont["env"]}
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"

    plugin = next(
        o for o in find(objs, "DaemonSet") if o["metadata"]["name"].endswith("device-plugin")
    )
    dp = container(plugin, "device-plugin")
    parse_cgpu(argv(dp)[1:])
    assert flags(dp)["isolation"] == "mps" and flags(dp)["mps-root"] == root
    dp_mount = _mounts(dp)[root]
    assert dp_mount["readOnly"] and _host_paths(plugin)[dp_mount["name"]] == root


def test_chart_mps_mode_renders_the_daemon_and_the_plugin_flags() -> None:
    objs = helm_template(
        *MPS_ON, "mps.defaultActiveThreadPercentage=50", "mps.defaultPinnedMemLimit=8GiB"
    )
    check_mps_objects(objs)
    cont = container(one(objs, "DaemonSet", "cgpu-mps-daemon"), "mps-daemon")
    assert flags(cont) == {
        "root": "/run/cgpu/mps",
        "compute-mode": "EXCLUSIVE_PROCESS",
        "active-thread-percentage": "50",
        "pinned-mem-limit": "8GiB",
    }
    objs = helm_template(*MPS_ON, "mps.root=/var/run/mps", "mps.exclusiveProcess=false")
    check_mps_objects(objs, "/var/run/mps")
    cont = container(one(objs, "DaemonSet", "cgpu-mps-daemon"), "mps-daemon")
    assert flags(cont)["compute-mode"] == "none"
    assert "active-thread-percentage" not in flags(cont)


def test_default_install_has_no_mps_and_advertises_compute() -> None:
    objs = helm_template()
    assert not find(objs, "DaemonSet", "cgpu-mps-daemon")
    dp = flags(container(one(objs, "DaemonSet", "cgpu-device-plugin"), "device-plugin"))
    assert dp["compute-resource"] == "aliyun.com/gpu-core.percentage"
    assert "isolation" not in dp
    off = helm_template("computeResourceName=")
    dp_off = container(one(off, "DaemonSet", "cgpu-device-plugin"), "device-plugin")
    assert flags(dp_off)["compute-resource"] == ""
    parse_cgpu(argv(dp_off)[1:])


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("isolation=mps",), "set mps.enabled=true"),
        (
            (
                *MPS_ON,
                "resourceName=volcano.sh/gpu-memory",
                "memoryUnit=MiB",
                "scheduler.enabled=false",
            ),
            "not available with resourceName volcano.sh/gpu-memory",
        ),
        (("isolation=hardware",), "isolation"),
        (("mps.defaultActiveThreadPercentage=101",), "defaultActiveThreadPercentage"),
        (("mps.defaultPinnedMemLimit=lots",), "defaultPinnedMemLimit"),
        (("computeResourceName=not a name",), "computeResourceName"),
    ],
)
def test_bad_mps_values_fail_with_a_clear_message(sets: tuple[str, ...], message: str) -> None:
    assert message in helm_template_error(*sets)


def test_plain_manifests_deploy_mps_mode() -> None:
    objs = kustomize(REPO / "deploy" / "mps")
    check_mps_objects(objs)
    names = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert {("DaemonSet", "cgpu-device-plugin"), ("DaemonSet", "cgpu-mps-daemon")} <= names
    # The patched plugin keeps every flag of deploy/deviceplugin.
    base = container(
        one(kustomize(REPO / "deploy" / "deviceplugin"), "DaemonSet", "cgpu-device-plugin"),
        "device-plugin",
    )
    patched = container(one(objs, "DaemonSet", "cgpu-device-plugin"), "device-plugin")
    assert flags(base).items() <= flags(patched).items()
