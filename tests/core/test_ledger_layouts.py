"""Readers take every ledger layout of cgpu.core.ledger.layouts() and headers that state more.

The previous layout (2) is the current one (3) without its compute block; a later release may
append fields (the header's size grows). See docs/operations.md, "Upgrading".
"""

from __future__ import annotations

import os
import struct

import pytest

from cgpu.core.ledger import LedgerError, init_ledger, layouts, read_ledger
from cgpu.core.native import load

MiB = 1 << 20
UUID = "GPU-11111111-2222-4333-8444-555555555555"
V2_SIZE = 39000  # header, 16 devices, 256 process slots
COMPUTE_AT = 39040  # layout 3's compute block: 16 x 64 bytes


def _header(path: os.PathLike[str], version: int, size: int) -> None:
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<II", version, size))


def _charged_ledger(tmp_path) -> str:
    """A layout-3 ledger where this process holds 60 MiB and the compute words say 50% fixed."""
    path = tmp_path / "cgpu.ledger"
    init_ledger(path, {UUID: 100 * MiB})
    _, lib = load()
    assert lib.cgpu_ledger_test_charge(str(path).encode(), 0, 60 * MiB, 1) == 0
    with open(path, "r+b") as f:
        f.seek(COMPUTE_AT)
        f.write(struct.pack("<II", 50, 1))
    return str(path)


def test_this_release_writes_3_and_reads_2_and_3(tmp_path):
    known = layouts()
    assert (known.writes, known.oldest_read, list(known.reads)) == (3, 2, [2, 3])
    init_ledger(tmp_path / "cgpu.ledger", {UUID: MiB})
    assert known.size == os.path.getsize(tmp_path / "cgpu.ledger")
    assert read_ledger(tmp_path / "cgpu.ledger").layout == known.writes


def test_layout_3_shows_its_compute_words(tmp_path):
    snap = read_ledger(_charged_ledger(tmp_path))
    assert snap.layout == 3
    assert (snap.devices[0].used, snap.devices[0].compute_limit) == (60 * MiB, 50)


@pytest.mark.parametrize("length", [V2_SIZE, COMPUTE_AT + 1024], ids=["cut", "with-junk-after"])
def test_layout_2_is_read_and_what_it_lacks_is_zero(tmp_path, length):
    path = _charged_ledger(tmp_path)
    _header(path, 2, V2_SIZE)
    os.truncate(path, length)
    snap = read_ledger(path)
    assert snap.layout == 2
    (device,) = snap.devices
    assert (device.uuid, device.limit, device.used, device.processes) == (
        UUID,
        100 * MiB,
        60 * MiB,
        1,
    )
    assert (device.compute_limit, device.compute_policy, device.compute_used) == (0, "", 0.0)
    assert [(p.pid, p.used) for p in snap.processes] == [(os.getpid(), {UUID: 60 * MiB})]


@pytest.mark.parametrize(
    ("version", "size", "length", "code"),
    [
        (2, V2_SIZE - 8, V2_SIZE, -5),  # states less than layout 2 has
        (2, V2_SIZE, V2_SIZE - 8, -4),  # the file is shorter than layout 2
        (3, V2_SIZE, COMPUTE_AT + 1024, -5),  # layout 3 stating layout 2's size
        (3, (1 << 20) + 8, COMPUTE_AT + 1024, -5),  # more than any later release may append
        (4, COMPUTE_AT + 1024, COMPUTE_AT + 1024, -3),  # a later layout version
    ],
)
def test_headers_that_do_not_add_up_are_refused(tmp_path, version, size, length, code):
    path = _charged_ledger(tmp_path)
    _header(path, version, size)
    os.truncate(path, length)
    with pytest.raises(LedgerError) as info:
        read_ledger(path)
    assert info.value.code == code


def test_fields_a_later_release_appended_are_ignored_by_readers_and_writers(tmp_path):
    path = tmp_path / "cgpu.ledger"
    init_ledger(path, {UUID: 100 * MiB})
    grown = COMPUTE_AT + 1024 + 4096
    _header(path, 3, grown)
    with open(path, "ab") as f:
        f.write(b"\xa5" * 4096)  # what a later release keeps there
    _, lib = load()
    assert lib.cgpu_ledger_test_charge(str(path).encode(), 0, 30 * MiB, 1) == 0  # a writer
    snap = read_ledger(path)
    assert (snap.layout, snap.devices[0].used) == (3, 30 * MiB)
    init_ledger(path, {UUID: 100 * MiB, UUID.replace("1111", "9999", 1): MiB})  # the host adds one
    assert [d.uuid[:8] for d in read_ledger(path).devices] == ["GPU-1111", "GPU-9999"]
    with open(path, "rb") as f:
        f.seek(COMPUTE_AT + 1024)
        assert f.read() == b"\xa5" * 4096  # left as it was
