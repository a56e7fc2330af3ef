"""What the plugin publishes on its Node object, kept correct across restarts and health changes.

gpushare mode: `aliyun.com/gpu-count` in the capacity. Volcano mode: `volcano.sh/gpu-number`
in the capacity and allocatable (Volcano's scheduler divides the node's gpu-memory by it to get
one card's memory, so it counts every GPU, healthy or not), and the node annotation
`volcano.sh/gpu-unhealthy-ids` listing the indexes of Unhealthy GPUs (removed when none is),
which the scheduler leaves out.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from cgpu.core.layout import GPU_COUNT, VOLCANO_GPU_NUMBER, VOLCANO_UNHEALTHY_IDS
from cgpu.deviceplugin.kube.client import KubeClient, KubeError
from cgpu.deviceplugin.rm import volcano
from cgpu.deviceplugin.rm.inventory import Inventory

log = logging.getLogger(__name__)


class NodeStatus:
    """Publishes the node's GPU figures; `publish` is safe to call from any thread."""

    def __init__(self, kube: KubeClient, inventory: Inventory, resource: str) -> None:
        self.kube = kube
        self.inventory = inventory
        self.volcano = volcano.is_volcano(resource)
        self._lock = threading.Lock()
        self._published: dict[str, Any] | None = None

    def body(self) -> dict[str, Any]:
        """The node-status patch for the current inventory."""
        count = str(len(self.inventory.gpus))
        if not self.volcano:
            return {"status": {"capacity": {GPU_COUNT: count}}}
        number = {VOLCANO_GPU_NUMBER: count}
        return {
            "metadata": {
                "annotations": {VOLCANO_UNHEALTHY_IDS: volcano.unhealthy_ids(self.inventory)}
            },
            "status": {"capacity": number, "allocatable": dict(number)},
        }

    def publish(self, force: bool = False) -> bool:
        """Patch the node when the figures changed (always with `force`); returns success."""
        with self._lock:
            body = self.body()
            if not force and body == self._published:
                return True
            try:
                self.kube.patch_node_status(body)
            except KubeError as err:
                self._published = None  # try again on the next call
                log.warning("could not publish the node's GPUs (%s); will retry", err)
                return False
            self._published = body
            log.info("node %s: published %s", self.kube.node_name, _describe(body))
            return True


def _describe(body: dict[str, Any]) -> str:
    status = body["status"]["capacity"]
    parts = [f"{k}={v}" for k, v in status.items()]
    for key, value in (body.get("metadata", {}).get("annotations") or {}).items():
        parts.append(f"{key}={value if value is not None else '(none)'}")
    return ", ".join(parts)
