"""XID rules and recovery, without NVML (the live path is in test_health.py)."""

from __future__ import annotations

from cgpu.core.gpus import GPU
from cgpu.deviceplugin.rm.health import HealthWatcher
from cgpu.deviceplugin.rm.inventory import Inventory
from cgpu.deviceplugin.rm.units import GIB, Unit

UUID = ["GPU-a", "GPU-b"]


def watcher(recovery: float, alive: set[str] | None = None, ignore=()) -> HealthWatcher:
    inv = Inventory([GPU(i, u, "sim", 2 * GIB) for i, u in enumerate(UUID)], Unit("GiB"))
    return HealthWatcher(inv, recovery, ignore, probe=lambda u: alive is None or u in alive)


def health(w: HealthWatcher) -> dict[str, str]:
    return dict(w.inventory.snapshot()[1])


def test_application_xids_leave_health_alone() -> None:
    w = watcher(10)
    for xid in (13, 31, 43, 45, 68, 109):
        assert not w.record("GPU-a", xid)
    assert set(health(w).values()) == {"Healthy"}
    assert w.inventory.version == 0


def test_critical_xid_marks_only_that_gpu_and_recovers_after_quiet() -> None:
    w = watcher(10)
    assert w.record("GPU-b", 79, now=100.0)
    assert health(w) == {
        "GPU-a-0": "Healthy",
        "GPU-a-1": "Healthy",
        "GPU-b-0": "Unhealthy",
        "GPU-b-1": "Unhealthy",
    }
    assert w.recover(now=105.0) == []
    w.record("GPU-b", 48, now=108.0)  # another fault restarts the quiet period
    assert w.recover(now=115.0) == []
    assert w.recover(now=118.0) == ["GPU-b"]
    assert set(health(w).values()) == {"Healthy"}


def test_no_recovery_when_nvml_lost_the_gpu_or_recovery_is_off() -> None:
    w = watcher(1, alive={"GPU-a"})
    w.record("GPU-b", 79, now=0.0)
    assert w.recover(now=100.0) == []
    w = watcher(0)
    w.record("GPU-a", 79, now=0.0)
    assert w.recover(now=1e9) == []
    assert not w.inventory.healthy("GPU-a")


def test_extra_ignored_xids() -> None:
    w = watcher(10, ignore=[94])
    assert not w.record("GPU-a", 94)
    assert w.record("GPU-a", 95)
