"""GPU health from NVML XID events, for the device plugin.

A critical XID marks the GPU's devices Unhealthy (the rules, shared with the DRA driver, are in
`cgpu.core.xid`: application errors and any XID given with --ignore-xid leave it alone, and a
GPU comes back Healthy after `recovery` seconds without a further critical XID, provided NVML
still answers for it; with recovery 0 it stays Unhealthy until the plugin restarts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from cgpu.core.xid import XidWatcher, probe
from cgpu.deviceplugin.rm.inventory import Inventory


class HealthWatcher(XidWatcher):
    """Watches the inventory's GPUs and marks their devices Unhealthy and Healthy again."""

    def __init__(
        self,
        inventory: Inventory,
        recovery: float,
        ignore: Iterable[int] = (),
        probe: Callable[[str], bool] = probe,
    ) -> None:
        super().__init__(
            lambda: [gpu.gpu.uuid for gpu in inventory.gpus],
            lambda uuid, healthy, _reason: inventory.set_health(uuid, healthy),
            recovery,
            ignore,
            probe,
        )
        self.inventory = inventory
