"""The cffi binding reads ledgers through the shim's own C, and rejects foreign files."""

from __future__ import annotations

import os

import pytest

from cgpu.core.config import ConfigError, load_config, parse_size, write_config
from cgpu.core.ledger import LedgerError, init_ledger, read_ledger
from cgpu.core.native import load
from cgpu.core.request import LimitError, parse_env, slice_for

MiB = 1 << 20
UUID = "GPU-11111111-2222-4333-8444-555555555555"


def test_new_ledger_is_visible_at_zero(tmp_path):
    path = tmp_path / "cgpu.ledger"
    init_ledger(path, {UUID: 4 * MiB * 1024})
    snap = read_ledger(path)
    assert [(d.uuid, d.limit, d.used, d.processes) for d in snap.devices] == [(UUID, 4 << 30, 0, 0)]
    assert snap.processes == []


def test_charges_show_per_process_and_credit_exactly(tmp_path):
    path = tmp_path / "cgpu.ledger"
    init_ledger(path, {UUID: 100 * MiB})
    _, lib = load()
    assert lib.cgpu_ledger_test_charge(str(path).encode(), 0, 60 * MiB, 1) == 0
    assert lib.cgpu_ledger_test_charge(str(path).encode(), 0, 60 * MiB, 1) == -8  # over the slice
    snap = read_ledger(path)
    assert snap.devices[0].used == 60 * MiB
    assert [(p.pid, p.used) for p in snap.processes] == [(os.getpid(), {UUID: 60 * MiB})]
    assert lib.cgpu_ledger_test_charge(str(path).encode(), 0, 60 * MiB, -1) == 0
    assert read_ledger(path).devices[0].used == 0


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"", -4),
        (b"CGPULDG1" + (3).to_bytes(4, "little") + b"\0" * 4, -4),  # layout 3, cut short
        (b"CGPULDG1" + (1).to_bytes(4, "little") + b"\0" * 200000, -3),  # older than any read
        (b"CGPULDG1" + (2).to_bytes(4, "little") + b"\0" * 200000, -5),  # layout 2, size 0
        (b"NOTCGPU!" + b"\0" * 200000, -2),
        (b"CGPULDG1" + (7).to_bytes(4, "little") + b"\0" * 200000, -3),
    ],
)
def test_foreign_truncated_and_other_versions_are_rejected(tmp_path, content, code):
    path = tmp_path / "cgpu.ledger"
    path.write_bytes(content)
    with pytest.raises(LedgerError) as info:
        read_ledger(path)
    assert info.value.code == code


def test_truncated_copy_of_a_real_ledger_is_rejected(tmp_path):
    path = tmp_path / "cgpu.ledger"
    init_ledger(path, {UUID: MiB})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(LedgerError) as info:
        read_ledger(path)
    assert info.value.code == -4


def test_missing_ledger_is_an_error(tmp_path):
    with pytest.raises(LedgerError):
        read_ledger(tmp_path / "absent")


def test_config_round_trip_uses_the_c_parser(tmp_path):
    write_config(tmp_path, {UUID: 3 * MiB, "GPU-aaaa": 5 << 30})
    assert load_config(tmp_path / "cgpu.conf") == {UUID: 3 * MiB, "GPU-aaaa": 5 << 30}
    (tmp_path / "cgpu.conf").write_text("version 1\ndevice GPU-x 12Q\n")
    with pytest.raises(ConfigError, match="malformed size"):
        load_config(tmp_path / "cgpu.conf")


def test_config_refuses_unsafe_values(tmp_path):
    with pytest.raises(ConfigError):
        write_config(tmp_path, {"../../etc/passwd": MiB})
    with pytest.raises(ConfigError):
        write_config(tmp_path, {UUID: 0})
    assert not (tmp_path / "cgpu.conf").exists()


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", 1), ("2K", 2048), ("3MiB", 3 * MiB), ("1G", 1 << 30), ("1TiB", 1 << 40)],
)
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize(
    "text", ["", "x", "0", "1.5G", "-1", "1 G B", "1GB", "18446744073709551616"]
)
def test_parse_size_rejects(text):
    with pytest.raises(ConfigError):
        parse_size(text)


def test_share_slice_matches_cgpu_rule():
    share = {"ALIYUN_COM_GPU_MEM_CONTAINER": "4", "ALIYUN_COM_GPU_MEM_DEV": "15"}
    assert slice_for(parse_env(share), 0, 16130 * MiB) // MiB == 4301
    with pytest.raises(LimitError):
        parse_env({"ALIYUN_COM_GPU_MEM_CONTAINER": "3", "ALIYUN_COM_GPU_MEM_DEV": "2"})


def test_readers_never_hang_on_a_stopped_lock_holder(tmp_path):
    """A process stopped (or killed) while holding the ledger lock blocks no reader."""
    import signal
    import subprocess
    import sys
    import time

    path = tmp_path / "cgpu.ledger"
    init_ledger(path, {UUID: 100 * MiB})
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, signal, sys; from cgpu.core.native import load; ffi, lib = load();"
            "assert lib.cgpu_ledger_test_hold_lock(sys.argv[1].encode()) == 0;"
            "print('held', flush=True); os.kill(os.getpid(), signal.SIGSTOP)",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    started = time.monotonic()
    assert read_ledger(path).devices[0].used == 0
    assert time.monotonic() - started < 2
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    # The dead holder's lock is repaired by the next locker, and charging works again.
    _, lib = load()
    assert lib.cgpu_ledger_test_charge(str(path).encode(), 0, MiB, 1) == 0
    assert read_ledger(path).devices[0].used == MiB


def test_config_and_ledger_refuse_symlinks_and_fifos(tmp_path):
    """A container's directory may hold anything: nothing in it makes a reader follow or block."""
    target = tmp_path / "elsewhere"
    write_config(tmp_path, {UUID: MiB})
    (tmp_path / "cgpu.conf").rename(target)
    (tmp_path / "cgpu.conf").symlink_to(target)
    with pytest.raises(ConfigError):
        load_config(tmp_path / "cgpu.conf")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(tmp_path / "fifo")
    with pytest.raises(LedgerError):
        read_ledger(tmp_path / "fifo")
    init_ledger(tmp_path / "real.ledger", {UUID: MiB})
    (tmp_path / "link.ledger").symlink_to(tmp_path / "real.ledger")
    with pytest.raises(LedgerError):
        read_ledger(tmp_path / "link.ledger")
