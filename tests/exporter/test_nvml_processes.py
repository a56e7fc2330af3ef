"""NVML's process lists: the newest call the library has, merged compute and graphics lists."""

from __future__ import annotations

from types import SimpleNamespace

from exporter_helpers import GIB, MIB, UUID0, UUID1, FakeNvml, FakeNvmlError

from cgpu.exporter.nvml import NvmlSource


class _NotFound(FakeNvmlError):
    value = 13  # NVML_ERROR_FUNCTION_NOT_FOUND


class _ProcessNvml(FakeNvml):
    """A driver without the _v3 entry points; GPU 1 refuses to list its processes."""

    def __init__(self) -> None:
        super().__init__([(UUID0, "T4", 16 * GIB, 0), (UUID1, "T4", 16 * GIB, 0)])
        self.calls: list[str] = []

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: int) -> list:
        self.calls.append("compute_v3")
        raise _NotFound("Function Not Found")

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: int) -> list:
        self.calls.append("compute_v2")
        if handle == 1:
            raise FakeNvmlError("GPU is lost")
        return [
            SimpleNamespace(pid=10, usedGpuMemory=300 * MIB),
            SimpleNamespace(pid=11, usedGpuMemory=None),  # not available
            SimpleNamespace(pid=12, usedGpuMemory=(1 << 64) - 1),  # NVML_VALUE_NOT_AVAILABLE
        ]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list:
        self.calls.append("graphics_v1")
        return [
            SimpleNamespace(pid=10, usedGpuMemory=300 * MIB),
            SimpleNamespace(pid=13, usedGpuMemory=MIB),
        ]


def test_process_lists_fall_back_and_merge() -> None:
    nvml = _ProcessNvml()
    source = NvmlSource(loader=lambda: nvml)
    source.gpus()
    found = source.processes()
    assert set(found) == {UUID0}  # GPU 1's list failed: unknown, not empty
    assert {(p.pid, p.used) for p in found[UUID0]} == {(10, 300 * MIB), (11, 0), (12, 0), (13, MIB)}
    nvml.calls.clear()
    source.processes()
    # The missing _v3 is not asked again; the unversioned graphics call stays the one used.
    assert "compute_v3" not in nvml.calls and nvml.calls.count("compute_v2") == 2


def test_no_process_call_means_no_host_view(fake_nvml: FakeNvml) -> None:
    source = NvmlSource(loader=lambda: fake_nvml)
    source.gpus()
    assert source.processes() == {}
    fake_nvml.fail_init = True
    assert NvmlSource(loader=lambda: fake_nvml).processes() == {}
