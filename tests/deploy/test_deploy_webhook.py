"""The chart's webhook objects (webhook.enabled): valid for Kubernetes 1.34 and 1.37, a command
line cgpu accepts, a certificate the webhook configuration trusts, least privilege, and the
KEP-5004 DeviceClass that never maps a resource the webhook translates."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

from deploy_helpers import (
    argv,
    bound_roles,
    container,
    find,
    helm_template,
    helm_template_error,
    one,
    parse_cgpu,
    rules,
    run_tool,
)
from kubeschema import validate_for

from cgpu.webhook.config import WebhookConfig

WEBHOOK = ("webhook.enabled=true", "dra.enabled=true", "devicePlugin.enabled=false",
           "scheduler.enabled=false")  # fmt: skip
VERSIONS = ("1.34.0", "1.37.0")
CERT_MANAGER = {"Issuer", "Certificate"}  # cert-manager's kinds: no schema offline


def rendered(*extra: str) -> list[dict]:
    objs = helm_template(*WEBHOOK, *extra)
    for obj in objs:
        if obj["kind"] not in CERT_MANAGER:
            validate_for(obj, VERSIONS)
    return objs


def test_webhook_objects_are_valid_and_off_by_default() -> None:
    objs = rendered()
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    for kind in ("Deployment", "Service", "ServiceAccount", "Secret", "ClusterRole",
                 "MutatingWebhookConfiguration"):  # fmt: skip
        assert (kind, "cgpu-webhook") in kinds or (kind, "cgpu-webhook-tls") in kinds, kind
    assert not find(helm_template(), "MutatingWebhookConfiguration")


def test_the_configuration_calls_mutate_pods_for_pod_creates_with_chosen_policies() -> None:
    config = one(rendered(), "MutatingWebhookConfiguration", "cgpu-webhook")
    (hook,) = config["webhooks"]
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["failurePolicy"] == "Fail" and hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["sideEffects"] == "NoneOnDryRun"  # it writes templates, never on a dry run
    assert hook["clientConfig"]["service"]["path"] == "/mutate-pods"
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["pods"], "scope": "Namespaced"}]  # fmt: skip
    (expr,) = hook["namespaceSelector"]["matchExpressions"]
    assert expr["operator"] == "NotIn" and {"kube-system"} <= set(expr["values"])


def test_selectors_and_policies_come_from_values() -> None:
    objs = rendered(
        "webhook.failurePolicy=Ignore", "webhook.reinvocationPolicy=Never",
        "webhook.objectSelector.matchLabels.cgpu\\.io/dra=yes",
        "webhook.namespaceSelector.matchLabels.gpu=dra", "webhook.onError=pass",
        "webhook.memoryUnit=MiB",
    )  # fmt: skip
    (hook,) = one(objs, "MutatingWebhookConfiguration", "cgpu-webhook")["webhooks"]
    assert hook["failurePolicy"] == "Ignore" and hook["reinvocationPolicy"] == "Never"
    assert hook["objectSelector"] == {"matchLabels": {"cgpu.io/dra": "yes"}}
    assert hook["namespaceSelector"]["matchLabels"] == {"gpu": "dra"}
    args = argv(container(one(objs, "Deployment", "cgpu-webhook"), "webhook"))
    config = WebhookConfig.from_args(parse_cgpu(args[1:]))
    assert (config.on_error, config.unit_mib) == ("pass", 1)


def test_the_command_line_serves_what_the_service_and_probes_reach() -> None:
    objs = rendered()
    deployment = one(objs, "Deployment", "cgpu-webhook")
    cont = container(deployment, "webhook")
    config = WebhookConfig.from_args(parse_cgpu(argv(cont)[1:]))
    assert config.on_error == "deny" and config.unit_mib == 1024
    assert {"kube-system"} <= config.exclude_namespaces
    assert cont["ports"][0]["containerPort"] == config.port
    assert cont["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "https",
                                                 "scheme": "HTTPS"}  # fmt: skip
    mount = next(m for m in cont["volumeMounts"] if m["name"] == "certs")
    assert Path(mount["mountPath"]) == config.cert_dir
    volume = next(
        v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "certs"
    )
    assert volume["secret"]["secretName"] == "cgpu-webhook-tls"
    assert cont["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_self_signed_certificate_is_trusted_by_the_configuration(tmp_path: Path) -> None:
    objs = rendered()
    secret = one(objs, "Secret", "cgpu-webhook-tls")
    (hook,) = one(objs, "MutatingWebhookConfiguration", "cgpu-webhook")["webhooks"]
    (tmp_path / "ca.crt").write_bytes(base64.b64decode(hook["clientConfig"]["caBundle"]))
    (tmp_path / "tls.crt").write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    done = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), str(tmp_path / "tls.crt")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    names = subprocess.run(
        ["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", str(tmp_path / "tls.crt")],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "DNS:cgpu-webhook.kube-system.svc" in names


def test_cert_manager_makes_the_certificate_and_injects_the_ca() -> None:
    objs = rendered("webhook.certManager.enabled=true")
    assert not find(objs, "Secret", "cgpu-webhook-tls")
    certificate = one(objs, "Certificate", "cgpu-webhook")
    assert certificate["spec"]["secretName"] == "cgpu-webhook-tls"
    assert "cgpu-webhook.kube-system.svc" in certificate["spec"]["dnsNames"]
    assert one(objs, "Issuer", "cgpu-webhook")["spec"] == {"selfSigned": {}}
    config = one(objs, "MutatingWebhookConfiguration", "cgpu-webhook")
    assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        "kube-system/cgpu-webhook"
    )
    assert "caBundle" not in config["webhooks"][0]["clientConfig"]
    named = rendered("webhook.certManager.enabled=true", "webhook.certManager.issuer=corp-ca")
    assert not find(named, "Issuer")
    assert one(named, "Certificate", "cgpu-webhook")["spec"]["issuerRef"]["name"] == "corp-ca"


def test_the_webhook_may_only_create_claim_templates() -> None:
    objs = rendered()
    assert bound_roles(objs, "cgpu-webhook") == {"ClusterRole/cgpu-webhook"}
    assert rules(one(objs, "ClusterRole", "cgpu-webhook")) == [
        (("resource.k8s.io",), ("resourceclaimtemplates",), (), ("create",))
    ]


def test_the_whole_gpu_class_maps_an_extended_resource_the_webhook_never_translates() -> None:
    objs = rendered("webhook.wholeGpuClass.enabled=true")
    whole = one(objs, "DeviceClass", "whole-gpu.cgpu.io")
    assert whole["spec"]["extendedResourceName"] == "cgpu.io/gpu"
    validate_for(whole, ("1.37.0",))
    nvidia = rendered("webhook.wholeGpuClass.enabled=true",
                      "webhook.wholeGpuClass.extendedResourceName=nvidia.com/gpu")  # fmt: skip
    assert one(nvidia, "DeviceClass", "whole-gpu.cgpu.io")["spec"]["extendedResourceName"] == (
        "nvidia.com/gpu"
    )
    for taken in ("aliyun.com/gpu-mem", "volcano.sh/gpu-memory"):
        name = f"webhook.wholeGpuClass.extendedResourceName={taken}"
        error = helm_template_error(*WEBHOOK, "webhook.wholeGpuClass.enabled=true", name)
        assert "the two must never claim the same pod" in error


def test_helm_lint_is_clean_with_the_webhook() -> None:
    args = [
        "lint",
        "--strict",
        str(Path(__file__).resolve().parents[2] / "deploy" / "helm" / "cgpu"),
    ]
    for item in WEBHOOK:
        args += ["--set", item]
    done = run_tool("helm", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout, done.stdout
