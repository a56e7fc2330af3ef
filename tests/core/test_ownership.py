"""cgpu.core.ownership: one owner per GPU, a lock that dies with its owner, the handover rule."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from cgpu.core import ownership
from cgpu.core.containers import create_container_dir
from cgpu.core.layout import SOURCE_DEVICE_PLUGIN, SOURCE_DRA, SOURCE_HOOK

UUIDS = [f"GPU-0a4e0000-0000-4000-8000-00000000000{i}" for i in range(3)]


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str


GPUS = [Gpu(i, u) for i, u in enumerate(UUIDS)]


def test_a_gpu_has_one_owner_and_the_other_learns_who(tmp_path: Path) -> None:
    plugin, owned, skipped = ownership.claim(tmp_path, SOURCE_DEVICE_PLUGIN, "n1", GPUS)
    assert (owned, skipped) == (GPUS, [])
    record = json.loads((tmp_path / "owners" / f"{UUIDS[0]}.json").read_text())
    assert (record["component"], record["pid"], record["node"]) == (
        SOURCE_DEVICE_PLUGIN,
        os.getpid(),
        "n1",
    )
    with pytest.raises(ownership.OwnershipError) as refused:
        ownership.claim(tmp_path, SOURCE_DRA, "n1", GPUS)
    message = str(refused.value)
    assert message.startswith("the DRA driver (cgpu dra-driver) owns no GPU on node n1")
    for gpu in GPUS:
        assert f"GPU {gpu.index} ({gpu.uuid}) is owned by the device plugin" in message
    assert f"pid {os.getpid()} on node n1" in message and "--gpus" in message
    plugin.release()
    assert not (tmp_path / "owners" / f"{UUIDS[0]}.json").exists()
    dra, owned, _ = ownership.claim(tmp_path, SOURCE_DRA, "n1", GPUS)
    assert owned == GPUS
    dra.release()


def test_a_selection_splits_the_gpus_between_the_two(tmp_path: Path) -> None:
    plugin, owned, skipped = ownership.claim(
        tmp_path, SOURCE_DEVICE_PLUGIN, "n1", GPUS, ownership.parse_selection(f"0,{UUIDS[2]}")
    )
    assert owned == [GPUS[0], GPUS[2]]
    assert [(s.index, s.reason) for s in skipped] == [(1, "is not in --gpus")]
    dra, owned, skipped = ownership.claim(tmp_path, SOURCE_DRA, "n1", GPUS)
    assert owned == [GPUS[1]]
    assert [s.index for s in skipped] == [0, 2]
    assert all("is owned by the device plugin" in s.reason for s in skipped)
    plugin.release()
    dra.release()


def test_a_killed_owner_lets_go(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from cgpu.core import ownership as o; from dataclasses import "
            "make_dataclass as m; G = m('G', ['index', 'uuid']); "
            f"o.claim({str(tmp_path)!r}, 'dra', 'n1', [G(0, {UUIDS[0]!r})]); "
            "print('owned', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "owned\n"
        with pytest.raises(ownership.OwnershipError, match=f"pid {child.pid} on node n1"):
            ownership.claim(tmp_path, SOURCE_DEVICE_PLUGIN, "n1", GPUS[:1])
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        # its record stays behind, but the lock went with it
        assert ownership.read_owner(tmp_path, UUIDS[0]).pid == child.pid  # type: ignore[union-attr]
        plugin, owned, _ = ownership.claim(tmp_path, SOURCE_DEVICE_PLUGIN, "n1", GPUS[:1])
        assert owned == GPUS[:1]
        assert ownership.read_owner(tmp_path, UUIDS[0]).pid == os.getpid()  # type: ignore[union-attr]
        plugin.release()
    finally:
        child.kill()
        child.wait()


def test_a_gpu_with_the_others_containers_is_not_taken(tmp_path: Path) -> None:
    create_container_dir(tmp_path, "dp-1", {UUIDS[0]: 4 << 30}, {"source": SOURCE_DEVICE_PLUGIN})
    create_container_dir(tmp_path, "hook-1", {UUIDS[1]: 4 << 30}, {"source": SOURCE_HOOK})
    create_container_dir(tmp_path, "dra-1", {UUIDS[2]: 4 << 30}, {"source": SOURCE_DRA})
    dra, owned, skipped = ownership.claim(tmp_path, SOURCE_DRA, "n1", GPUS)
    assert owned == GPUS[1:]  # its own directories and other sources' do not count
    (busy,) = skipped
    assert busy.index == 0
    assert "containers of the device plugin (cgpu device-plugin): directories dp-1 " in busy.reason
    assert not (tmp_path / "owners" / f"{UUIDS[0]}.json").exists()
    assert dra.take_free(GPUS, None) == []
    (tmp_path / "containers" / "dp-1" / "cgpu.conf").write_text("garbage\n")
    assert dra.take_free(GPUS, None) == []  # a config it cannot read may name the GPU
    os.rename(tmp_path / "containers" / "dp-1", tmp_path / "gone")
    assert dra.take_free(GPUS, None) == [GPUS[0]]
    assert sorted(dra.owned) == sorted(UUIDS)
    dra.release()


@pytest.mark.parametrize(
    "record",
    [
        b"\x00" * 10000,
        b"[1]",
        b'{"component": "dra", "pid": 7, "node": "n1", "since": NaN}',
        b'{"component": "dra", "pid": 7, "node": "n1", "since": 1e400}',
        b'{"component": "dra", "pid": "x", "node": "n1", "since": 1}',
    ],
)
def test_a_record_it_cannot_read_still_refuses(tmp_path: Path, record: bytes) -> None:
    first, _, _ = ownership.claim(tmp_path, SOURCE_DRA, "n1", GPUS[:1])
    (tmp_path / "owners" / f"{UUIDS[0]}.json").write_bytes(record)
    with pytest.raises(ownership.OwnershipError, match="is owned by another process"):
        ownership.claim(tmp_path, SOURCE_DEVICE_PLUGIN, "n1", GPUS[:1])
    first.release()


def test_a_node_without_gpus_is_no_error(tmp_path: Path) -> None:
    _, owned, skipped = ownership.claim(tmp_path, SOURCE_DRA, "n1", [])
    assert owned == [] and skipped == []


@pytest.mark.parametrize("text", ["", "all", " all "])
def test_all_selects_every_gpu(text: str) -> None:
    assert ownership.parse_selection(text) is None


@pytest.mark.parametrize("text", [",", "0,../x", "gpu 1"])
def test_a_bad_selection_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="expected 'all', or GPU indexes or UUIDs"):
        ownership.parse_selection(text)
