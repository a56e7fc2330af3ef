"""NodePrepareResources and NodeUnprepareResources for one claim at a time.

Prepare reads the claim from the API server, makes its container directory (the config and
ledger every container with a slice gets: `cgpu.core.containers`) and its CDI spec, and
records both in the checkpoint before answering. Preparing a claim again returns what was
made the first time. Unprepare deletes the spec, the directory and the checkpoint entry; an
unknown claim is already unprepared.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from cgpu.core.containers import (
    META_COMPUTE_PRIORITY,
    containers_root,
    create_container_dir,
    remove_container_dir,
)
from cgpu.core.layout import SOURCE_DRA
from cgpu.dra import cdi
from cgpu.dra.checkpoint import Checkpoint, Prepared, PreparedDevice
from cgpu.dra.claims import Allocation, ClaimError, parse_claim
from cgpu.dra.computeconfig import claim_priority, compute_lines
from cgpu.dra.contract import apply_contract
from cgpu.dra.inventory import Inventory

log = logging.getLogger(__name__)

UID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")


class ClaimReader(Protocol):
    """Reads a ResourceClaim (ResourceApi, or a test's stand-in)."""

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ClaimRef:
    """A claim as the kubelet names it."""

    namespace: str
    uid: str
    name: str


@dataclass(frozen=True)
class PrepareConfig:
    """Where prepare writes, and what it mounts."""

    state_dir: Path
    cdi_dir: Path
    shim: Path
    preload: Path
    pool: str
    dev_dir: Path = Path("/dev")
    contexts: Mapping[str, int] = field(default_factory=dict)  # {uuid: a context's bytes}


def container_key(uid: str) -> str:
    """The container directory of a claim."""
    return f"dra-{uid}"


class Preparer:
    """Prepares and unprepares claims; safe to call from several gRPC threads."""

    def __init__(
        self,
        inventory: Inventory,
        settings: PrepareConfig,
        claims: ClaimReader,
        checkpoint: Checkpoint,
    ) -> None:
        self.inventory = inventory
        self.settings = settings
        self.claims = claims
        self.checkpoint = checkpoint
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, uid: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(uid, threading.Lock())

    def prepare(self, ref: ClaimRef) -> Prepared:
        """Prepare one claim; raises ClaimError (or the reader's KubeError) saying why not."""
        if not ref.name or not ref.namespace:
            raise ClaimError(f"claim {ref}: namespace, uid and name are required")
        _check_uid(ref)
        with self._lock(ref.uid):
            done = self.checkpoint.get(ref.uid)
            key = container_key(ref.uid)
            spec = cdi.spec_path(self.settings.cdi_dir, ref.uid)
            made = (containers_root(self.settings.state_dir) / key).is_dir()
            if done is not None and made and spec.is_file():
                return done
            claim = self.claims.get_claim(ref.namespace, ref.name)
            allocation = parse_claim(claim, ref.uid, self.settings.pool, self.inventory)
            return self._make(ref, claim, allocation)

    def _make(self, ref: ClaimRef, claim: dict[str, Any], allocation: Allocation) -> Prepared:
        key = container_key(ref.uid)
        gpus = [g for g in self.inventory.gpus if g.uuid in allocation.memory]
        allocation, contract_env = apply_contract(claim, allocation, gpus)  # webhook's claims
        directory = create_container_dir(
            self.settings.state_dir,
            key,
            allocation.memory,
            _meta(ref, claim, allocation),
            compute_lines(allocation.compute, claim_priority(claim)),
            dict(self.settings.contexts),
        )
        spec = cdi.build_spec(
            ref.uid,
            gpus,
            directory,
            self.settings.shim,
            self.settings.preload,
            self.settings.dev_dir,
            contract_env,
        )
        cdi.write_spec(self.settings.cdi_dir, ref.uid, spec)
        devices = [
            PreparedDevice([r.request], r.pool, r.device, r.share_id) for r in allocation.results
        ]
        prepared = Prepared(ref.namespace, ref.name, key, cdi.device_id(ref.uid), devices)
        self.checkpoint.put(ref.uid, prepared)
        log.info(
            "prepared claim %s/%s (%s): %s",
            ref.namespace,
            ref.name,
            ref.uid,
            ", ".join(f"{r.device} {r.memory >> 20} MiB {r.compute}%" for r in allocation.results),
        )
        return prepared

    def unprepare(self, ref: ClaimRef) -> None:
        """Undo prepare; a claim never prepared (or already unprepared) is fine."""
        _check_uid(ref)
        with self._lock(ref.uid):
            cdi.remove_spec(self.settings.cdi_dir, ref.uid)
            remove_container_dir(self.settings.state_dir, container_key(ref.uid))
            self.checkpoint.drop(ref.uid)
            log.info("unprepared claim %s/%s (%s)", ref.namespace, ref.name, ref.uid)
        with self._guard:
            self._locks.pop(ref.uid, None)


def _check_uid(ref: ClaimRef) -> None:
    """A claim UID names files: only what a Kubernetes UID can be."""
    if not UID_RE.match(ref.uid):
        raise ClaimError(f"claim {ref.namespace}/{ref.name}: malformed uid {ref.uid!r}")


def _meta(ref: ClaimRef, claim: dict[str, Any], allocation: Allocation) -> dict[str, Any]:
    """meta.json: the claim, and the pod it is reserved for (what the exporter labels)."""
    meta: dict[str, Any] = {
        "source": SOURCE_DRA,
        "namespace": ref.namespace,
        "claim": ref.name,
        "claim_uid": ref.uid,
        "device_ids": [cdi.device_id(ref.uid)],  # how the exporter finds it in pod-resources
        "gpu_uuids": list(allocation.memory),
        "devices": [r.device for r in allocation.results],
        "share_ids": [r.share_id for r in allocation.results if r.share_id],
        # its turns' priority, with or without a compute limit (best effort: discovery.py)
        META_COMPUTE_PRIORITY: claim_priority(claim),
    }
    pods = [
        r
        for r in (claim.get("status") or {}).get("reservedFor") or []
        if isinstance(r, dict) and r.get("resource") == "pods"
    ]
    if len(pods) == 1:
        meta.update(pod=str(pods[0].get("name", "")), pod_uid=str(pods[0].get("uid", "")))
    return meta
