"""meta.json and the clean-up loop against whatever a container directory may hold."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from cgpu.core import cleanup
from cgpu.core.containers import (
    META_MAX_BYTES,
    MetaError,
    containers_root,
    create_container_dir,
    load_meta,
    read_meta,
)
from cgpu.core.ledger import LedgerError, read_ledger
from cgpu.deviceplugin.plugin import cleanup as plugin_cleanup
from cgpu.hooks import sweep as hook_sweep

UUID = "GPU-5eed0000-0000-4000-8000-000000000000"


def _dir(state: Path, key: str, **meta: object) -> Path:
    return create_container_dir(state, key, {UUID: 1 << 30}, dict(meta))


def _put(path: Path, what: str) -> None:
    path.unlink()
    if what == "fifo":
        os.mkfifo(path)
    elif what == "dir":
        path.mkdir()
    elif what == "symlink":
        path.symlink_to("/dev/zero")
    elif what == "huge":
        path.write_text(json.dumps({"pod": "x" * META_MAX_BYTES}))
    elif what == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif what == "binary":
        path.write_bytes(b'{"pod": "\xff\xfe"}')
    elif what == "list":
        path.write_text("[1, 2]")
    elif what == "bigint":
        path.write_text('{"created": ' + "9" * 5000 + "}")


@pytest.mark.parametrize(
    "what", ["fifo", "dir", "symlink", "huge", "deep", "binary", "list", "bigint"]
)
def test_bad_meta_is_an_error_never_a_hang_or_a_crash(tmp_path: Path, what: str) -> None:
    d = _dir(tmp_path, "c1", source="hook")
    _put(d / "meta.json", what)
    start = time.monotonic()
    with pytest.raises(MetaError):
        load_meta(d)
    assert read_meta(d) == {}
    assert time.monotonic() - start < 5


def test_known_fields_of_the_wrong_type_are_dropped(tmp_path: Path) -> None:
    d = _dir(tmp_path, "c1")
    wrong = {
        "source": "device-plugin",
        "namespace": 5,
        "pod": "p",
        "device_ids": {"a": 1},
        "created": "yesterday",
        "init_pid": True,
        "init_start_time": -1,
        "annotations": {"a": 1},
        "extra": [1],
    }
    (d / "meta.json").write_text(json.dumps(wrong))
    assert load_meta(d) == {"source": "device-plugin", "pod": "p", "extra": [1]}
    (d / "meta.json").write_text('{"created": 1e999, "device_ids": ["a", 2]}')
    assert load_meta(d) == {}


def test_ledger_with_a_uuid_that_is_not_utf8_is_corrupt(tmp_path: Path) -> None:
    d = _dir(tmp_path, "c1")
    ledger = d / "cgpu.ledger"
    data = ledger.read_bytes()
    at = data.find(UUID.encode())
    ledger.write_bytes(data[:at] + b"\xff\xfe\n" + data[at + 3 :])
    with pytest.raises(LedgerError) as err:
        read_ledger(ledger)
    assert err.value.code == -5


def test_the_cleanup_loop_survives_hostile_directories(tmp_path: Path) -> None:
    # Plugin directories with garbage in place of meta.json: judged on what is left, never a crash.
    old = _dir(tmp_path, "plugin-old", source="device-plugin", device_ids=["d1"], created=1.0)
    typed = _dir(tmp_path, "plugin-typed", source="device-plugin", created=1.0)
    (typed / "meta.json").write_text(
        json.dumps({"source": "device-plugin", "device_ids": [["x"]], "created": "x"})
    )
    fifo = _dir(tmp_path, "plugin-fifo", source="device-plugin")
    _put(fifo / "meta.json", "fifo")
    removed = plugin_cleanup.sweep(tmp_path, {}, set(), grace=60, now=time.time())
    # The typed one lost its bad fields, so it has no devices and a creation time of 0: stale.
    assert sorted(removed) == ["plugin-old", "plugin-typed"]
    assert old.exists() is False and fifo.is_dir()  # no source left: nobody's, kept

    # Hook directories: an init pid that is not a number, or not a process, never crashes.
    gone = _dir(tmp_path, "hook-gone", source="hook", init_pid=2**22 + 7, init_start_time=1)
    odd = _dir(tmp_path, "hook-odd", source="hook")
    (odd / "meta.json").write_text('{"source": "hook", "init_pid": -5, "init_start_time": 1}')
    deep = _dir(tmp_path, "hook-deep", source="hook")
    _put(deep / "meta.json", "deep")
    assert hook_sweep.sweep(tmp_path) == ["hook-gone"]
    assert not gone.exists() and odd.is_dir() and deep.is_dir()


def test_a_failing_judge_keeps_its_entry_and_the_loop_goes_on(tmp_path: Path) -> None:
    for key in ("a1", "a2", "a3"):
        _dir(tmp_path, key, source="a")

    def judge(entry: cleanup.Entry) -> str | None:
        if entry.key == "a2":
            raise KeyError("surprise")
        return "stale"

    assert cleanup.sweep(tmp_path, {"a": judge}) == ["a1", "a3"]
    assert sorted(p.name for p in containers_root(tmp_path).iterdir()) == ["a2"]
