"""Rendering and checking the deployment files: helm, kustomize, schemas, the cgpu CLI parser."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubeschema import validate_for

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "cgpu"
SCHEDULER = REPO / "deploy" / "scheduler"
RELEASE = "cgpu"
NAMESPACE = "kube-system"
# The oldest Kubernetes the chart supports (KubeSchedulerConfiguration v1) and the newest with
# schemas in kubernetes-validate: every object must be valid in both.
K8S_VERSIONS = ("1.25.0", "1.37.0")
# Prometheus operator kinds: no schema offline; tests check their structure themselves.
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}

Obj = dict[str, Any]


def tool(name: str) -> str:
    """Path of helm or kubectl: $CGPU_HELM/$CGPU_KUBECTL, build/tools (setup.sh), else PATH."""
    explicit = os.environ.get(f"CGPU_{name.upper()}")
    if explicit:
        return explicit
    built = REPO / "build" / "tools" / name
    if built.is_file() and os.access(built, os.X_OK):
        return str(built)
    found = shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found: run scripts/setup.sh (it installs it into build/tools)")
    return found


def run_tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run helm or kubectl offline (no kubeconfig, no cluster)."""
    env = {**os.environ, "KUBECONFIG": os.devnull, "HELM_CACHE_HOME": "/tmp/cgpu-helm-cache"}
    return subprocess.run(
        [tool(name), *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def load_all(text: str) -> list[Obj]:
    """The non-empty YAML documents of a stream."""
    return [doc for doc in yaml.safe_load_all(text) if doc]


def helm_template(*sets: str, namespace: str = NAMESPACE) -> list[Obj]:
    """`helm template` of the chart with `--set` values; fails the test on a render error."""
    args = ["template", RELEASE, str(CHART), "--namespace", namespace]
    for item in sets:
        args += ["--set", item]
    done = run_tool("helm", *args)
    assert done.returncode == 0, f"helm template {sets} failed:\n{done.stderr}"
    return load_all(done.stdout)


def helm_template_error(*sets: str) -> str:
    """stderr of a `helm template` that must fail."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for item in sets:
        args += ["--set", item]
    done = run_tool("helm", *args)
    assert done.returncode != 0, f"helm template {sets} rendered but should have failed"
    return done.stderr


def kustomize(directory: Path) -> list[Obj]:
    """`kubectl kustomize` of a directory."""
    done = run_tool("kubectl", "kustomize", str(directory))
    assert done.returncode == 0, f"kubectl kustomize {directory} failed:\n{done.stderr}"
    return load_all(done.stdout)


WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet"}


def validate(objs: Iterable[Obj]) -> None:
    """Each object is valid, strictly (no unknown field), for every version in K8S_VERSIONS.

    Workloads also mount only volumes they declare (the API server rejects the others).
    """
    for obj in objs:
        if obj["kind"] in WORKLOADS:
            declared = {v["name"] for v in pod_spec(obj).get("volumes", [])}
            for cont in containers(obj):
                for mount in cont.get("volumeMounts", []):
                    assert mount["name"] in declared, (
                        f"{obj['metadata']['name']}/{cont['name']} mounts undeclared "
                        f"volume {mount['name']}"
                    )
        if obj["kind"] in CRD_KINDS:
            continue
        validate_for(obj, K8S_VERSIONS)


def find(objs: Iterable[Obj], kind: str, name: str | None = None) -> list[Obj]:
    """Objects of `kind` (and `name`)."""
    return [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objs: Iterable[Obj], kind: str, name: str) -> Obj:
    """The single object of `kind` named `name`."""
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def pod_spec(obj: Obj) -> Obj:
    """The pod template's spec of a workload."""
    return obj["spec"]["template"]["spec"]


def containers(obj: Obj) -> Iterator[Obj]:
    """Init containers and containers of a workload."""
    spec = pod_spec(obj)
    yield from spec.get("initContainers", [])
    yield from spec["containers"]


def container(obj: Obj, name: str) -> Obj:
    """The (init) container `name` of a workload."""
    found = [c for c in containers(obj) if c["name"] == name]
    assert len(found) == 1, f"{obj['metadata']['name']} has no single container {name}"
    return found[0]


def argv(cont: Obj) -> list[str]:
    """A container's command line: command + args."""
    return [*cont.get("command", []), *cont.get("args", [])]


def flags(cont: Obj) -> dict[str, str]:
    """`--name=value` arguments of a container, as a dict."""
    out = {}
    for arg in argv(cont):
        match = re.fullmatch(r"--([a-z-]+)=(.*)", arg)
        if match:
            out[match.group(1)] = match.group(2)
    return out


def parse_cgpu(args: list[str]) -> argparse.Namespace:
    """`cgpu ARGS` parsed by the installed cgpu's real parser; fails the test on an error."""
    from cgpu.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return build_parser(args).parse_args(args)
    except SystemExit:
        raise AssertionError(f"cgpu rejects {args}: {err.getvalue().strip()}") from None


def cgpu_has(command: str) -> bool:
    """Whether the installed cgpu has subcommand `command`."""
    from cgpu.cli import COMMANDS

    return command in COMMANDS


def rules(
    role: Obj,
) -> list[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
    """A Role's rules as sorted (apiGroups, resources, resourceNames, verbs) tuples."""
    return sorted(
        (
            tuple(sorted(r.get("apiGroups", []))),
            tuple(sorted(r.get("resources", []))),
            tuple(sorted(r.get("resourceNames", []))),
            tuple(sorted(r["verbs"])),
        )
        for r in role["rules"]
    )


# The extender's least privilege, as (apiGroups, resources, resourceNames, verbs).
EXTENDER_RULES = [
    (("",), ("nodes",), (), ("get", "list", "watch")),
    (("",), ("pods",), (), ("get", "list", "patch", "watch")),
    (("",), ("pods/binding",), (), ("create",)),
]


def bound_roles(objs: list[Obj], sa_name: str, namespace: str = NAMESPACE) -> set[str]:
    """'ClusterRole/x' and 'Role/ns/x' bound to ServiceAccount namespace/sa_name."""
    out = set()
    for binding in find(objs, "ClusterRoleBinding") + find(objs, "RoleBinding"):
        for subject in binding["subjects"]:
            if (subject["kind"], subject["name"], subject.get("namespace")) == (
                "ServiceAccount",
                sa_name,
                namespace,
            ):
                ref = binding["roleRef"]
                if binding["kind"] == "RoleBinding":
                    out.add(f"{ref['kind']}/{binding['metadata']['namespace']}/{ref['name']}")
                else:
                    out.add(f"{ref['kind']}/{ref['name']}")
    return out
