"""The translation, request by request: what each pod becomes, and what is refused and why.

Requests go through `Admitter.handle` with AdmissionReview JSON as the API server sends it;
the answer's JSONPatch is applied, and the pod and its templates are validated against the
Kubernetes 1.34 and 1.37 schemas (kubernetes-validate, strict)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubeschema import validate_for
from webhook_helpers import patched, pod_from_models, review, seed_pods

from cgpu.webhook.admit import Admitter
from cgpu.webhook.config import LabelSelector, WebhookConfig
from cgpu.webhook.metrics import Metrics
from cgpu.webhook.templates import TemplateStore

K8S_VERSIONS = ("1.34.0", "1.37.0")
GIB = 1024
Obj = dict[str, Any]


class Writer:
    """Records the templates the webhook creates, as the API server would hold them."""

    def __init__(self) -> None:
        self.templates: dict[tuple[str, str], Obj] = {}
        self.creates = 0

    def create_template(self, namespace: str, body: Obj) -> bool:
        self.creates += 1
        key = (namespace, body["metadata"]["name"])
        if key in self.templates:
            return False
        self.templates[key] = body
        return True


def admitter(writer: Writer | None = None, **options: Any) -> Admitter:
    config = WebhookConfig(**options)
    return Admitter(config, TemplateStore(writer or Writer(), config.device_class), Metrics())


def admit(pod: Obj, webhook: Admitter | None = None, **kw: Any) -> tuple[Obj, Obj]:
    """(the answer's response, the pod as the API server stores it after the patch)."""
    webhook = webhook or admitter()
    status, answer = webhook.handle(json.dumps(review(pod, **kw)).encode())
    assert status == 200, answer
    assert isinstance(answer, dict)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    return answer["response"], patched(pod, answer)


def requests_of(template: Obj) -> Obj:
    return template["spec"]["spec"]["devices"]["requests"][0]["exactly"]


def template_of(writer: Writer, pod: Obj, claim: str) -> Obj:
    entry = next(e for e in pod["spec"]["resourceClaims"] if e["name"] == claim)
    return writer.templates[("default", entry["resourceClaimTemplateName"])]


def no_extended_resources(pod: Obj) -> None:
    for kind in ("initContainers", "containers"):
        for c in pod["spec"].get(kind) or []:
            for section in ("limits", "requests"):
                left = set((c.get("resources") or {}).get(section) or {})
                assert not left & {
                    "aliyun.com/gpu-mem",
                    "aliyun.com/gpu-core.percentage",
                    "volcano.sh/gpu-memory",
                }, c


# --- the seeds' pods ------------------------------------------------------------------------

EXPECTED = {  # seed -> (memory on each GPU, GPUs, contract, units)
    "000": ("3803Mi", 1, "gpushare", 3803),
    "001": ("2Gi", 4, "gpushare", 2),
    "002": ("1Gi", 1, "volcano", 1024),
    "004": ("4Gi", 1, "gpushare", 4),
}


@pytest.mark.parametrize("index", range(len(seed_pods())))
def test_every_seed_pod_is_rewritten_into_a_valid_claim(index: int) -> None:
    seed, unit, pod = seed_pods()[index]
    writer = Writer()
    webhook = admitter(writer, unit_mib=GIB if unit == "GiB" else 1)
    response, after = admit(pod, webhook)
    assert response["allowed"] is True
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    if "nvidia.com/gpu" in limits:  # 004's "before": a whole GPU, left to the DeviceClass
        assert "patch" not in response and after == pod
        return
    memory, count, contract, units = EXPECTED[seed]
    no_extended_resources(after)
    assert after["spec"]["containers"][0]["resources"]["claims"] == [{"name": "cgpu-gpu-0"}]
    template = template_of(writer, after, "cgpu-gpu-0")
    exactly = requests_of(template)
    assert exactly["deviceClassName"] == "gpu.cgpu.io"
    assert exactly["count"] == count
    assert exactly["capacity"]["requests"] == {"memory": memory}
    params = template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert (params["contract"], params["units"], params["memory"]) == (contract, units, memory)
    constraints = template["spec"]["spec"]["devices"].get("constraints", [])
    if count > 1:
        assert constraints == [{"requests": ["gpu"], "distinctAttribute": "gpu.cgpu.io/uuid"}]
    else:
        assert constraints == []
    validate_for(after, K8S_VERSIONS)
    validate_for(template, K8S_VERSIONS)


def test_seed_units_follow_the_device_plugin_memory_unit() -> None:
    """The same `aliyun.com/gpu-mem: 4` is 4 GiB under --memory-unit GiB, 4 MiB under MiB."""
    pod = pod_from_models("p", [{"name": "c", "limits": {"aliyun.com/gpu-mem": "4"}}])
    for unit_mib, memory in ((GIB, "4Gi"), (1, "4Mi")):
        writer = Writer()
        _, after = admit(pod, admitter(writer, unit_mib=unit_mib))
        assert requests_of(template_of(writer, after, "cgpu-gpu-0"))["capacity"]["requests"] == {
            "memory": memory
        }


# --- containers, init containers, GPUs --------------------------------------------------------


def test_several_containers_each_get_a_claim_and_share_templates_by_shape() -> None:
    pod = pod_from_models(
        "multi",
        [
            {"name": "a", "limits": {"aliyun.com/gpu-mem": "4"}},
            {"name": "b", "limits": {"aliyun.com/gpu-mem": "4"}},
            {
                "name": "c",
                "limits": {"aliyun.com/gpu-mem": "2", "aliyun.com/gpu-core.percentage": "30"},
            },
            {"name": "cpu-only", "limits": {"cpu": "1"}},
        ],
    )
    writer = Writer()
    _, after = admit(pod, admitter(writer))
    claims = [c["resources"].get("claims") for c in after["spec"]["containers"]]
    assert claims == [
        [{"name": "cgpu-gpu-0"}],
        [{"name": "cgpu-gpu-1"}],
        [{"name": "cgpu-gpu-2"}],
        None,
    ]
    entries = {e["name"]: e["resourceClaimTemplateName"] for e in after["spec"]["resourceClaims"]}
    assert entries["cgpu-gpu-0"] == entries["cgpu-gpu-1"] != entries["cgpu-gpu-2"]
    assert len(writer.templates) == 2
    c = requests_of(template_of(writer, after, "cgpu-gpu-2"))
    assert c["capacity"]["requests"] == {"memory": "2Gi", "compute": "30"}
    assert after["spec"]["containers"][3]["resources"] == {"limits": {"cpu": "1"}}
    annotation = json.loads(after["metadata"]["annotations"]["cgpu.io/gpushare-request"])
    assert annotation == {
        "a": {"aliyun.com/gpu-mem": 4},
        "b": {"aliyun.com/gpu-mem": 4},
        "c": {"aliyun.com/gpu-core.percentage": 30, "aliyun.com/gpu-mem": 2},
    }
    validate_for(after, K8S_VERSIONS)


def test_init_containers_reuse_a_claim_of_their_shape_and_sidecars_get_their_own() -> None:
    pod = pod_from_models(
        "init",
        [{"name": "main", "limits": {"aliyun.com/gpu-mem": "4"}}],
        init=[
            {"name": "warm", "limits": {"aliyun.com/gpu-mem": "4"}},  # same shape: reuse
            {"name": "big", "limits": {"aliyun.com/gpu-mem": "8"}},  # its own, before main
            {"name": "big2", "limits": {"aliyun.com/gpu-mem": "8"}},  # runs after big: shares
            {"name": "side", "restartPolicy": "Always", "limits": {"aliyun.com/gpu-mem": "4"}},
        ],
    )
    writer = Writer()
    _, after = admit(pod, admitter(writer))
    init = {c["name"]: c["resources"]["claims"] for c in after["spec"]["initContainers"]}
    main = after["spec"]["containers"][0]["resources"]["claims"]
    assert init["warm"] == main  # runs before main: the kubelet reuses its devices too
    assert init["side"] not in (main, init["big"])  # a sidecar runs beside main and big
    assert init["big"] == init["big2"] != main  # one after the other, before main
    assert len(after["spec"]["resourceClaims"]) == 3
    no_extended_resources(after)
    validate_for(after, K8S_VERSIONS)


def test_gpu_count_asks_for_distinct_gpus_each_with_its_share() -> None:
    pod = pod_from_models(
        "spread",
        [{"name": "c", "limits": {"aliyun.com/gpu-mem": "6"}}],
        {"aliyun.com/gpu-count": "3"},
    )
    writer = Writer()
    _, after = admit(pod, admitter(writer))
    template = template_of(writer, after, "cgpu-gpu-0")
    assert requests_of(template)["count"] == 3
    assert requests_of(template)["capacity"]["requests"] == {"memory": "2Gi"}
    assert template["spec"]["spec"]["devices"]["constraints"] == [
        {"requests": ["gpu"], "distinctAttribute": "gpu.cgpu.io/uuid"}
    ]


def test_requests_without_limits_are_read_and_removed() -> None:
    pod = pod_from_models("req", [{"name": "c", "requests": {"aliyun.com/gpu-mem": "2"}}])
    writer = Writer()
    _, after = admit(pod, admitter(writer))
    assert after["spec"]["containers"][0]["resources"]["requests"] == {}
    assert requests_of(template_of(writer, after, "cgpu-gpu-0"))["capacity"]["requests"] == {
        "memory": "2Gi"
    }


# --- idempotent, scoped, dry-run --------------------------------------------------------------


def test_a_rewritten_pod_passes_unchanged() -> None:
    pod = seed_pods()[1][2]
    webhook = admitter()
    _, once = admit(pod, webhook)
    response, twice = admit(once, webhook)
    assert response["allowed"] is True and "patch" not in response
    assert twice == once


def test_pods_that_ask_for_nothing_or_other_operations_pass_unchanged() -> None:
    plain = pod_from_models("plain", [{"name": "c", "limits": {"cpu": "1"}}])
    response, after = admit(plain)
    assert response["allowed"] and "patch" not in response and after == plain
    gpu = pod_from_models("upd", [{"name": "c", "limits": {"aliyun.com/gpu-mem": "1"}}])
    response, _ = admit(gpu, operation="UPDATE")
    assert response["allowed"] and "patch" not in response


def test_scope_by_namespace_and_pod_labels() -> None:
    pod = pod_from_models(
        "s", [{"name": "c", "limits": {"aliyun.com/gpu-mem": "1"}}], {"pool": "dp"}
    )
    cases = [
        ({"exclude_namespaces": frozenset({"default"})}, False),
        ({"namespaces": frozenset({"gpu"})}, False),
        ({"namespaces": frozenset({"default"})}, True),
        ({"pod_selector": LabelSelector.parse("pool!=dp")}, False),
        ({"pod_selector": LabelSelector.parse("pool=dp")}, True),
        ({"pod_selector": LabelSelector.parse("!pool")}, False),
    ]
    for options, rewritten in cases:
        response, _ = admit(pod, admitter(**options))
        assert ("patch" in response) is rewritten, options


def test_a_dry_run_writes_no_template() -> None:
    writer = Writer()
    pod = pod_from_models("dry", [{"name": "c", "limits": {"aliyun.com/gpu-mem": "3"}}])
    response, after = admit(pod, admitter(writer), dry_run=True)
    assert "patch" in response and writer.creates == 0
    no_extended_resources(after)


def test_a_template_is_written_once_per_shape_and_namespace() -> None:
    writer = Writer()
    webhook = admitter(writer)
    pod = pod_from_models("t", [{"name": "c", "limits": {"aliyun.com/gpu-mem": "3"}}])
    for _ in range(5):
        admit(pod, webhook)
    assert writer.creates == 1
    text = webhook.metrics.registry.get_sample_value("cgpu_webhook_rewrites_total")
    assert text == 5


# --- refusals -----------------------------------------------------------------------------------

REFUSED = [
    (
        {"aliyun.com/gpu-mem": "4GB"},
        None,
        "spec.containers[0].resources.limits[aliyun.com/gpu-mem]",
    ),
    ({"aliyun.com/gpu-mem": "0.5"}, None, "aliyun.com/gpu-mem"),
    ({"aliyun.com/gpu-mem": "-2"}, None, "aliyun.com/gpu-mem"),
    ({"aliyun.com/gpu-mem": "4Gi"}, None, "counts units, not bytes"),
    ({"aliyun.com/gpu-mem": "99999999999999999999"}, None, "aliyun.com/gpu-mem"),
    ({"volcano.sh/gpu-memory": "1e15"}, None, "more than any GPU holds"),
    ({"aliyun.com/gpu-mem": "7"}, "2", "multiple of the GPU count"),
    ({"aliyun.com/gpu-mem": "4"}, "many", "metadata.labels[aliyun.com/gpu-count]"),
    ({"aliyun.com/gpu-mem": "4"}, "0", "aliyun.com/gpu-count"),
    ({"aliyun.com/gpu-mem": "66"}, "33", "at most 32"),
    ({"aliyun.com/gpu-core.percentage": "30"}, None, "without aliyun.com/gpu-mem"),
    ({"aliyun.com/gpu-mem": "2", "aliyun.com/gpu-core.percentage": "130"}, None, "at most 100"),
    ({"aliyun.com/gpu-mem": "4", "aliyun.com/gpu-core.percentage": "30"}, "2", "one GPU's"),
    ({"aliyun.com/gpu-mem": "2", "volcano.sh/gpu-memory": "1024"}, None, "ask for one"),
]


@pytest.mark.parametrize(("limits", "count", "words"), REFUSED)
def test_what_cannot_be_translated_is_denied_with_the_field(limits, count, words) -> None:
    labels = {"aliyun.com/gpu-count": count} if count is not None else None
    pod = pod_from_models("bad", [{"name": "c", "limits": limits}], labels)
    writer = Writer()
    response, after = admit(pod, admitter(writer))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert message.startswith("cgpu webhook cannot translate pod default/bad: "), message
    assert words in message
    assert response["status"]["code"] == 400
    assert after == pod and writer.creates == 0


def test_limits_and_requests_that_differ_are_denied() -> None:
    pod = pod_from_models(
        "differ",
        [
            {
                "name": "c",
                "limits": {"aliyun.com/gpu-mem": "4"},
                "requests": {"aliyun.com/gpu-mem": "2"},
            }
        ],
    )
    response, _ = admit(pod)
    assert (
        not response["allowed"]
        and "limits 4 and requests 2 differ" in response["status"]["message"]
    )


def test_a_pod_with_dra_claims_and_gpushare_resources_is_denied() -> None:
    pod = pod_from_models("mixed", [{"name": "c", "limits": {"aliyun.com/gpu-mem": "4"}}])
    pod["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "rdma"}]
    response, _ = admit(pod)
    assert not response["allowed"]
    assert "DRA claims (nic) and for gpushare/Volcano resources" in response["status"]["message"]


def test_on_error_pass_admits_unchanged_with_a_warning() -> None:
    pod = pod_from_models(
        "bad", [{"name": "c", "limits": {"aliyun.com/gpu-mem": "7"}}], {"aliyun.com/gpu-count": "2"}
    )
    webhook = admitter(on_error="pass")
    response, after = admit(pod, webhook)
    assert response["allowed"] is True and "patch" not in response and after == pod
    assert "multiple of the GPU count" in response["warnings"][0]
    assert (
        webhook.metrics.registry.get_sample_value(
            "cgpu_webhook_refusals_total", {"action": "passed"}
        )
        == 1
    )


def test_reviews_that_are_not_admission_v1_are_answered_with_a_message() -> None:
    webhook = admitter()
    pod = pod_from_models("p", [{"name": "c", "limits": {"aliyun.com/gpu-mem": "1"}}])
    old = review(pod, api_version="admission.k8s.io/v1beta1")
    status, answer = webhook.handle(json.dumps(old).encode())
    assert status == 200 and isinstance(answer, dict)
    assert answer["apiVersion"] == "admission.k8s.io/v1beta1"  # the API server reads its own
    assert answer["response"]["uid"] == old["request"]["uid"]
    assert answer["response"]["allowed"] is False
    assert "admission.k8s.io/v1 only" in answer["response"]["status"]["message"]
    for body, words in (
        (b"{not json", "not JSON"),
        (b"[]", "not an AdmissionReview"),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
            "no request",
        ),
    ):
        status, answer = webhook.handle(body)
        assert status == 400 and isinstance(answer, str) and words in answer, answer


def test_malformed_pods_are_denied_not_crashed() -> None:
    webhook = admitter()
    for spec, words in (
        ("not a spec", "spec: missing or not an object"),
        ({"containers": "x"}, "spec.containers: not a list"),
        ({"containers": [7]}, "spec.containers[0]: not an object"),
        ({"containers": [{"name": "c", "resources": {"limits": []}}]}, "limits: not an object"),
        (
            {"containers": [{"name": "c", "resources": {"limits": {"aliyun.com/gpu-mem": None}}}]},
            "aliyun.com/gpu-mem",
        ),
    ):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "m", "namespace": "default"},
            "spec": spec,
        }
        response, _ = admit(pod, webhook)
        assert response["allowed"] is False, spec
        assert words in response["status"]["message"], response["status"]["message"]


def test_a_template_write_that_fails_is_a_refusal_not_a_crash() -> None:
    from cgpu.core.kube import KubeError

    class Failing(Writer):
        def create_template(self, namespace: str, body: Obj) -> bool:
            raise KubeError("create resourceclaimtemplate: HTTP 403 forbidden", 403)

    pod = pod_from_models("p", [{"name": "c", "limits": {"aliyun.com/gpu-mem": "1"}}])
    response, _ = admit(pod, admitter(Failing()))
    assert response["allowed"] is False and response["status"]["code"] == 500
    assert "HTTP 403 forbidden" in response["status"]["message"]


def _configs(template: Obj) -> list[Obj]:
    return [c["opaque"]["parameters"] for c in template["spec"]["spec"]["devices"]["config"]]


def test_the_compute_priority_annotation_reaches_the_claim_as_the_drivers_compute_config() -> None:
    writer = Writer()
    webhook = admitter(writer)
    limits = {"aliyun.com/gpu-mem": "4", "aliyun.com/gpu-core.percentage": "30"}
    pod = pod_from_models("infer", [{"name": "a", "limits": limits}])
    pod["metadata"]["annotations"] = {"cgpu.io/compute-priority": "high"}
    response, stored = admit(pod, webhook)
    assert response["allowed"]
    template = template_of(writer, stored, stored["spec"]["resourceClaims"][0]["name"])
    kinds = {p["kind"]: p for p in _configs(template)}
    assert kinds["ComputeConfig"]["priority"] == "high"
    assert kinds["DevicePluginContract"]["units"] == 4
    validate_for(template, K8S_VERSIONS)
    # the DRA driver reads it back as the container's priority
    from cgpu.dra.computeconfig import claim_priority

    claim = {
        "status": {
            "allocation": {
                "devices": {
                    "config": [
                        {"source": "FromClaim", **c}
                        for c in template["spec"]["spec"]["devices"]["config"]
                    ]
                }
            }
        }
    }
    assert claim_priority(claim) == "high"
    # a pod of the same shape without the annotation gets another template: the priority
    # is part of the shape
    plain = pod_from_models("batch", [{"name": "a", "limits": limits}])
    _, stored_plain = admit(plain, webhook)
    assert (
        stored_plain["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
        != stored["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    )


def test_a_malformed_compute_priority_is_refused_and_one_without_a_share_orders_nothing() -> None:
    bad = pod_from_models(
        "x",
        [
            {
                "name": "a",
                "limits": {"aliyun.com/gpu-mem": "4", "aliyun.com/gpu-core.percentage": "30"},
            }
        ],
    )
    bad["metadata"]["annotations"] = {"cgpu.io/compute-priority": "urgent"}
    response, _ = admit(bad)
    assert not response["allowed"]
    assert "cgpu.io/compute-priority" in response["status"]["message"]
    writer = Writer()
    memory_only = pod_from_models("y", [{"name": "a", "limits": {"aliyun.com/gpu-mem": "4"}}])
    memory_only["metadata"]["annotations"] = {"cgpu.io/compute-priority": "low"}
    response, stored = admit(memory_only, admitter(writer))
    assert response["allowed"]
    template = template_of(writer, stored, stored["spec"]["resourceClaims"][0]["name"])
    assert [p["kind"] for p in _configs(template)] == ["DevicePluginContract"]
