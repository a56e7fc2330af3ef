"""Fixtures for the exporter tests: container dirs, live charging processes, a fake NVML."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

GIB = 1 << 30
MIB = 1 << 20
UUID0 = "GPU-5eed0000-0000-4000-8000-000000000000"
UUID1 = "GPU-5eed0000-0000-4000-8000-000000000001"


class Holder:
    """A forked child that charges one ledger as a live process and keeps it until released.

    The charge goes through `cgpu_ledger_test_charge`, which claims a slot and its liveness lock
    exactly as the shim does, so the exporter sees a real live process of the container.
    """

    def __init__(self, ledger: Path, charges: dict[int, int]) -> None:
        from cgpu.native import load

        _, lib = load()
        ready_r, ready_w = os.pipe()
        self._release_r, self._release_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: charge, report, then block until released or killed
            code = 1
            try:
                os.close(ready_r)
                os.close(self._release_w)
                rc = 0
                for dev, size in charges.items():
                    rc = rc or lib.cgpu_ledger_test_charge(str(ledger).encode(), dev, size, 1)
                os.write(ready_w, str(rc).encode())
                os.close(ready_w)
                os.read(self._release_r, 1)
                code = 0
            finally:
                os._exit(code)
        os.close(ready_w)
        os.close(self._release_r)
        self.pid = pid
        answer = os.read(ready_r, 16).decode()
        os.close(ready_r)
        if answer != "0":
            self.kill()
            raise RuntimeError(f"charging {ledger} failed: {answer!r}")

    def release(self) -> None:
        """Let the child exit normally."""
        if self.pid:
            os.close(self._release_w)
            os.waitpid(self.pid, 0)
            self.pid = 0

    def kill(self) -> None:
        """SIGKILL the child, as an OOM kill would."""
        if self.pid:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            os.close(self._release_w)
            self.pid = 0


@pytest.fixture
def hold() -> Iterator[Callable[[Path, dict[int, int]], Holder]]:
    """hold(ledger_path, {device_index: bytes}) -> a live charging process (reaped at teardown)."""
    holders: list[Holder] = []

    def make(ledger: Path, charges: dict[int, int]) -> Holder:
        holder = Holder(ledger, charges)
        holders.append(holder)
        return holder

    yield make
    for holder in holders:
        holder.release()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """An empty cgpu state dir."""
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
def make_container(state_dir: Path) -> Callable[..., Path]:
    """make_container(key, {uuid: bytes}, **meta) -> the container dir, made as the plugin does."""
    from cgpu.containers import create_container_dir

    def make(key: str, limits: dict[str, int], **meta: Any) -> Path:
        meta.setdefault("source", "device-plugin")
        return create_container_dir(state_dir, key, limits, meta)

    return make


class FakeNvmlError(Exception):
    """Stands in for pynvml.NVMLError."""


class FakeNvml:
    """Enough of pynvml for the exporter: a list of GPUs, and switches to make calls fail."""

    def __init__(self, gpus: list[tuple[str, str, int, int]]) -> None:
        self.gpus = gpus  # (uuid, name, total, used)
        self.fail_init = False
        self.fail_memory: set[int] = set()
        self.init_calls = 0
        self.shutdown_calls = 0

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.fail_init:
            raise FakeNvmlError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return self.gpus[handle][0].encode()

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self.gpus[handle][1]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        if handle in self.fail_memory:
            raise FakeNvmlError("GPU is lost")
        _, _, total, used = self.gpus[handle]
        return SimpleNamespace(total=total, used=used, free=total - used)


@pytest.fixture
def fake_nvml() -> FakeNvml:
    """Two 16 GiB GPUs, 1 GiB used on the first."""
    return FakeNvml([(UUID0, "Tesla V100-SXM2-16GB", 16 * GIB, GIB), (UUID1, "Tesla T4", 16 * GIB, 0)])
