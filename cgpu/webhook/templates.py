"""ResourceClaimTemplates, one per claim shape in a namespace, shared by every pod of that shape.

The name says the shape and ends with a digest of the whole spec, so that two shapes (or two
releases that write a shape differently) never share a name, and a template, whose spec the
API server does not let change, never needs to:
`cgpu-gpushare-4gib-x1-<digest>`, `cgpu-gpushare-2gib-c30-x1-<digest>`,
`cgpu-volcano-1024mib-x1-<digest>`. The claims made from a template belong to their pods and
go with them; templates hold nothing and stay for the next pod.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from cgpu.core.layout import (
    CLAIM_CONFIG_API_VERSION,
    COMPUTE_CONFIG_KIND,
    WEBHOOK_TEMPLATE_PREFIX,
)
from cgpu.core.quantity import format_bytes
from cgpu.webhook.translate import Shape

REQUEST = "gpu"  # the one request of a template's claim
UUID_ATTRIBUTE = "uuid"  # the driver's device attribute that tells GPUs apart
MANAGED_BY = ("app.kubernetes.io/managed-by", "cgpu-webhook")

Obj = dict[str, Any]


def template_spec(shape: Shape, device_class: str) -> Obj:
    """The ResourceClaimSpec of a claim of `shape` on `device_class` (resource.k8s.io/v1)."""
    requests: Obj = {"memory": format_bytes(shape.memory)}
    if shape.compute:
        requests["compute"] = str(shape.compute)
    exactly: Obj = {
        "deviceClassName": device_class,
        "allocationMode": "ExactCount",
        "count": shape.count,
        "capacity": {"requests": requests},
    }
    devices: Obj = {
        "requests": [{"name": REQUEST, "exactly": exactly}],
        "config": [
            {
                "requests": [REQUEST],
                "opaque": {"driver": device_class, "parameters": shape.contract.parameters()},
            }
        ],
    }
    if shape.priority is not None:  # the DRA driver's ComputeConfig (cgpu.dra.computeconfig)
        parameters = {
            "apiVersion": CLAIM_CONFIG_API_VERSION,
            "kind": COMPUTE_CONFIG_KIND,
            "priority": shape.priority,
        }
        devices["config"].append(
            {"requests": [REQUEST], "opaque": {"driver": device_class, "parameters": parameters}}
        )
    if shape.count > 1:
        devices["constraints"] = [
            {"requests": [REQUEST], "distinctAttribute": f"{device_class}/{UUID_ATTRIBUTE}"}
        ]
    return {"devices": devices}


def template_name(shape: Shape, device_class: str) -> str:
    """The template's name: readable shape, then a digest of its spec."""
    contract = shape.contract
    size = (
        f"{contract.units}gib"
        if contract.unit_mib == 1024
        else f"{contract.units * contract.unit_mib}mib"
    )
    compute = f"-c{shape.compute}" if shape.compute else ""
    if shape.priority is not None:
        compute += f"-{shape.priority}"
    spec = json.dumps(template_spec(shape, device_class), sort_keys=True).encode()
    digest = hashlib.sha256(spec).hexdigest()[:10]
    return f"{WEBHOOK_TEMPLATE_PREFIX}{contract.contract}-{size}{compute}-x{shape.count}-{digest}"


def template_object(shape: Shape, namespace: str, device_class: str) -> Obj:
    """The whole ResourceClaimTemplate object for `namespace`."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": template_name(shape, device_class),
            "namespace": namespace,
            "labels": {MANAGED_BY[0]: MANAGED_BY[1]},
        },
        "spec": {"spec": template_spec(shape, device_class)},
    }


class TemplateWriter(Protocol):
    """Creates a ResourceClaimTemplate; returns False when it already exists."""

    def create_template(self, namespace: str, body: Obj) -> bool: ...


class TemplateStore:
    """Makes sure a template exists before a pod names it. A template known to exist is
    remembered for `ttl` seconds, so that a busy namespace costs one create per shape and per
    `ttl`, and a template someone deleted is written again within `ttl`."""

    def __init__(
        self,
        writer: TemplateWriter,
        device_class: str,
        ttl: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.writer = writer
        self.device_class = device_class
        self.ttl = ttl
        self.clock = clock
        self._known: dict[tuple[str, str], float] = {}  # -> when it was last seen to exist
        self._lock = threading.Lock()

    def ensure(self, namespace: str, shape: Shape, dry_run: bool = False) -> tuple[str, bool]:
        """(the template's name, whether it was created now); a dry run writes nothing."""
        body = template_object(shape, namespace, self.device_class)
        key = (namespace, body["metadata"]["name"])
        now = self.clock()
        with self._lock:
            seen = self._known.get(key)
        if dry_run or (seen is not None and now - seen < self.ttl):
            return key[1], False
        created = self.writer.create_template(namespace, body)
        with self._lock:
            self._known[key] = now
        return key[1], created
