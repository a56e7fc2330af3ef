"""What the webhook tests share: the seeds' pods, AdmissionReviews as the API server sends
them, self-signed certificates, and a webhook served over HTTPS against a fake API server."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import uuid
from pathlib import Path
from typing import Any

import yaml

from cgpu.webhook.patch import apply_patch

DATA = Path(__file__).parent / "data"
Obj = dict[str, Any]


def seed_pods() -> list[tuple[str, str, Obj]]:
    """(seed, memory unit, pod) for every example workload of the seeds, as a Pod object in
    namespace default, named after its workload."""
    found = []
    seed, unit = "", ""
    for doc in yaml.safe_load_all((DATA / "seed_workloads.yaml").read_text()):
        if "seed" in doc:
            seed, unit = doc["seed"], doc["unit"]
            continue
        if doc["kind"] == "Pod":
            pod = {"apiVersion": "v1", "kind": "Pod", **{k: doc[k] for k in ("metadata", "spec")}}
        else:
            template = doc["spec"]["template"]
            meta = {**template.get("metadata", {}), "generateName": doc["metadata"]["name"] + "-"}
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}
        pod["metadata"]["namespace"] = "default"
        found.append((seed, unit, pod))
    return found


def pod_from_models(
    name: str,
    containers: list[Obj],
    labels: dict[str, str] | None = None,
    init: list[Obj] | None = None,
) -> Obj:
    """A pod built with the official client's models and serialized as the API server sends it.
    Each container: {"name", "limits": {...}, optional "requests", "restartPolicy"}."""
    from kubernetes import client

    def model(c: Obj) -> Any:
        return client.V1Container(
            name=c["name"],
            image="registry.example/cuda:12",
            restart_policy=c.get("restartPolicy"),
            resources=client.V1ResourceRequirements(
                limits=c.get("limits"), requests=c.get("requests")
            ),
        )

    pod = client.V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=client.V1ObjectMeta(name=name, namespace="default", labels=labels),
        spec=client.V1PodSpec(
            containers=[model(c) for c in containers],
            init_containers=[model(c) for c in init] if init else None,
        ),
    )
    return client.ApiClient().sanitize_for_serialization(pod)


def review(
    pod: Obj,
    operation: str = "CREATE",
    dry_run: bool = False,
    api_version: str = "admission.k8s.io/v1",
) -> Obj:
    """An AdmissionReview for `pod`, with every field the API server fills
    (k8s.io/api/admission/v1 AdmissionRequest)."""
    meta = pod.get("metadata", {})
    return {
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", "default"),
            "operation": operation,
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": str(uuid.uuid4()),
                "groups": ["system:serviceaccounts"],
            },
            "object": pod,
            "oldObject": None,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def patched(pod: Obj, answer: Obj) -> Obj:
    """`pod` with the answer's JSONPatch applied (unchanged when there is none)."""
    response = answer["response"]
    if "patch" not in response:
        return pod
    assert response["patchType"] == "JSONPatch"
    return apply_patch(pod, json.loads(base64.b64decode(response["patch"])))


def make_cert(directory: Path, name: str = "cgpu-webhook") -> Path:
    """A self-signed tls.crt/tls.key for localhost in `directory` (openssl)."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            f"/CN={name}",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(directory / "tls.key.new"),
            "-out",
            str(directory / "tls.crt.new"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    (directory / "tls.key.new").replace(directory / "tls.key")
    (directory / "tls.crt.new").replace(directory / "tls.crt")
    return directory / "tls.crt"


def client_context(ca: Path) -> ssl.SSLContext:
    """A client context that trusts only `ca` (as the API server trusts the caBundle)."""
    context = ssl.create_default_context(cafile=str(ca))
    return context
