"""GPU health from NVML XID events: an unhealthy GPU leaves the ResourceSlice.

A critical XID takes the GPU out of the published pool, so no new claim lands on it. The
rules are the device plugin's (`cgpu.core.xid`): application errors leave the GPU published,
and it is published again after `recovery` seconds without a further critical XID, provided
NVML still answers for it; with recovery 0 it stays out until the driver restarts.
"""

from __future__ import annotations

from cgpu.core.xid import XidWatcher
from cgpu.dra.inventory import Inventory


class HealthWatcher(XidWatcher):
    """Watches the inventory's GPUs and withdraws or republishes them."""

    def __init__(self, inventory: Inventory, recovery: float) -> None:
        super().__init__(
            lambda: [gpu.uuid for gpu in inventory.gpus], inventory.set_health, recovery
        )
        self.inventory = inventory
