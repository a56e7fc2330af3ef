"""The compute host view: the exporter's compute series from `cgpu compute-arbiter`'s status file.

First from the real arbiter (its default status file in the state dir, a client holding turns
as the shim does), then from hand-written files: every field, missing fields, a GPU without
NVML's per-process samples, stale, corrupt and untrusted files, and hostile-looking names and
values. Whatever the file holds, the memory series stay and no container is named that the
exporter does not know by its own directory.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from compute.arbiter_kit import Client, wait_until
from exporter_helpers import GIB, UUID0, UUID1, ctr, labels, scrape

from cgpu.core.computestatus import status_path
from cgpu.core.layout import CONFIG_NAME, LEDGER_NAME
from cgpu.exporter.collector import CgpuCollector

USED = "cgpu_container_gpu_compute_used_percent"
LIMIT = "cgpu_container_gpu_compute_limit_percent"
HOST = "cgpu_container_gpu_compute_host_percent"
OUT = "cgpu_container_gpu_compute_out_of_turn_seconds_total"
OVER = "cgpu_container_over_compute"
UP = "cgpu_exporter_compute_status_up"
ERRORS = "cgpu_compute_status_errors_total"
TRAIN = ctr("ml", "p", "train", UUID0, "")


def _limited(make_container: Callable[..., Path], key: str = "capped", **meta: str) -> Path:
    """A container with a 1 GiB slice on both GPUs and a `fixed` 30% limit on GPU 0."""
    meta = meta or {"namespace": "ml", "pod": "p", "container": "train"}
    directory = make_container(key, {UUID0: GIB, UUID1: GIB}, **meta)
    with open(directory / CONFIG_NAME, "a") as conf:
        conf.write(f"compute {UUID0} 30 fixed\n")
    return directory


def _write(state_dir: Path, doc: Any, mode: int = 0o644) -> Path:
    path = status_path(state_dir)
    tmp = path.with_name(".tmp-status")
    tmp.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return path


def _status(entries: dict[str, dict[str, Any]], host_view: Any = True, age: float = 0.0) -> dict:
    """A status document as the arbiter writes it, for GPU 0."""
    gpu: dict[str, Any] = {"holder": None, "epoch": 1, "containers": entries}
    if host_view is not None:
        gpu["host_view"] = host_view
    return {"time": time.time() - age, "bad_messages": 0, "bad_configs": 0, "gpus": {UUID0: gpu}}


FULL = {
    "limit": 30,
    "policy": "fixed",
    "share_percent": 29.5,
    "charged_ns": 123,
    "forced_revokes": 0,
    "host_percent": 41.25,
    "out_of_turn_s": 3.5,
    "over_compute": True,
}


def _errors(series: dict) -> dict[str, float]:
    return {dict(k)["reason"]: v for k, v in series[ERRORS].items()}


# --- the real arbiter ----------------------------------------------------------------------


@pytest.fixture
def arbiter(state_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`cgpu compute-arbiter` over the state dir's containers, with its default status file."""
    (state_dir / "containers").mkdir(exist_ok=True)
    log = (state_dir.parent / "arbiter.log").open("w")
    command = [sys.executable, "-m", "cgpu.cli", "compute-arbiter"]
    command += ["--containers", str(state_dir / "containers"), "--no-nvml"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    yield proc
    proc.kill()
    proc.wait()
    log.close()


def test_real_arbiter_status_feeds_the_compute_series(
    state_dir: Path, make_container: Callable[..., Path], arbiter: subprocess.Popen[bytes]
) -> None:
    directory = _limited(make_container)
    wait_until(lambda: (directory / "compute.sock").exists(), 15, "the container's socket")
    path = status_path(state_dir)
    wait_until(path.exists, 5, "the status file at its default home")

    # One process of the container wants the GPU all the time and answers every revoke, as
    # the shim does; it never writes its ledger, so the ledger's own figure stays 0.
    client = Client(directory).hello((0, UUID0))
    stop = threading.Event()
    worker = threading.Thread(target=client.saturate, args=(0, stop), daemon=True)
    worker.start()
    collector = CgpuCollector(state_dir)
    name = str(directory.absolute())
    try:

        def share() -> float:
            doc = json.loads(path.read_text())
            entry = doc["gpus"].get(UUID0, {}).get("containers", {}).get(name, {})
            return entry.get("share_percent", 0) if entry.get("share_percent", 0) > 20 else 0

        wait_until(share, 15, "the arbiter charging the container its turns")
        # The figure in the file and the scrape's, from one and the same file.
        for _ in range(20):
            before = path.read_bytes()
            series = scrape(collector)
            if path.read_bytes() == before:
                break
        doc = json.loads(before)
        entry = doc["gpus"][UUID0]["containers"][name]
        assert series[UP][labels()] == 1
        assert series[LIMIT] == {TRAIN: 30}
        assert series[USED] == {TRAIN: entry["share_percent"]}
        assert 20 < series[USED][TRAIN] <= 40  # its 30% turns, not the ledger's 0
        # The host view fields, where this arbiter writes them; absent where it does not.
        for family, field, cast in ((HOST, "host_percent", float), (OUT, "out_of_turn_s", float)):
            if field in entry and doc["gpus"][UUID0].get("host_view", True):
                assert series[family] == {TRAIN: cast(entry[field])}
            elif field not in entry:
                assert TRAIN not in series.get(family, {})
        if "over_compute" in entry:
            assert series[OVER] == {TRAIN: 1 if entry["over_compute"] else 0}
        assert set(_errors(series).values()) == {0}
    finally:
        stop.set()
        worker.join(timeout=10)
        client.close()

    # The arbiter dies: after 5 s its file is stale, its figures are withheld and the series
    # falls back to the ledger's (which says 0); the staleness is counted.
    arbiter.send_signal(signal.SIGKILL)
    arbiter.wait()
    time.sleep(5.5)
    series = scrape(collector)
    assert series[UP][labels()] == 0
    assert series[USED] == {TRAIN: 0}
    assert _errors(series)["stale"] == 1
    assert series["cgpu_container_gpu_memory_limit_bytes"][TRAIN] == GIB


# --- hand-written files --------------------------------------------------------------------


def test_every_field_becomes_its_series(
    state_dir: Path, make_container: Callable[..., Path]
) -> None:
    directory = _limited(make_container)
    _write(state_dir, _status({str(directory): FULL}))
    series = scrape(CgpuCollector(state_dir))
    assert series[USED] == {TRAIN: 29.5}
    assert series[HOST] == {TRAIN: 41.25}
    assert series[OUT] == {TRAIN: 3.5}
    assert series[OVER] == {TRAIN: 1}
    assert series[UP][labels()] == 1
    # Only GPU 0 has a compute limit and an arbiter entry: GPU 1 has none of these series.
    other = ctr("ml", "p", "train", UUID1, "")
    assert all(other not in series.get(f, {}) for f in (USED, HOST, OUT, OVER))


@pytest.mark.parametrize(
    ("tail", "kind"), [("fixed", ("fixed", "normal")), ("share low", ("share", "low"))]
)
def test_the_compute_info_series_names_policy_and_priority(
    state_dir: Path, make_container: Callable[..., Path], tail: str, kind: tuple[str, str]
) -> None:
    directory = make_container(
        "capped", {UUID0: GIB, UUID1: GIB}, namespace="ml", pod="p", container="train"
    )
    with open(directory / CONFIG_NAME, "a") as conf:
        conf.write(f"compute {UUID0} 30 {tail}\n")
    series = scrape(CgpuCollector(state_dir))
    info = TRAIN | labels(policy=kind[0], priority=kind[1])
    assert series["cgpu_container_gpu_compute_info"] == {info: 1}
    assert series[LIMIT] == {TRAIN: 30}  # its labels stay those of the used series


def test_an_older_arbiter_and_a_gpu_without_samples(
    state_dir: Path, make_container: Callable[..., Path]
) -> None:
    directory = _limited(make_container)
    old = {k: FULL[k] for k in ("limit", "policy", "share_percent", "charged_ns")}
    _write(state_dir, _status({str(directory): old}, host_view=None))
    series = scrape(CgpuCollector(state_dir))
    assert series[USED] == {TRAIN: 29.5}  # the arbiter's turns
    assert not series.get(HOST) and not series.get(OUT) and not series.get(OVER)

    # NVML gives no per-process samples on this GPU: no host percent, the rest still counts.
    _write(state_dir, _status({str(directory): FULL}, host_view=False))
    series = scrape(CgpuCollector(state_dir))
    assert not series.get(HOST)
    assert series[OUT] == {TRAIN: 3.5} and series[OVER] == {TRAIN: 1}


def test_a_stale_file_is_not_shown_as_current(
    state_dir: Path, make_container: Callable[..., Path]
) -> None:
    directory = _limited(make_container)
    collector = CgpuCollector(state_dir)
    for age in (10.0, -60.0):  # an arbiter that stopped; a time stamp in the future
        _write(state_dir, _status({str(directory): FULL}, age=age))
        series = scrape(collector)
        assert series[UP][labels()] == 0
        assert series[USED] == {TRAIN: 0}  # the ledger's own figure, not the old turns
        assert not series.get(HOST) and not series.get(OUT) and not series.get(OVER)
    assert _errors(series)["stale"] == 2


@pytest.mark.parametrize(
    "content",
    [
        "",
        "not json",
        "[1, 2]",
        '{"time": "now", "gpus": {}}',
        '{"time": 1e400, "gpus": {}}',
        '{"gpus": {}}',
        '{"time": 1, "gpus": []}',
        "[" * 100_000 + "]" * 100_000,
        b"\xff\xfe\x00garbage".decode("latin-1"),
    ],
)
def test_corrupt_files_are_skipped_and_counted(
    state_dir: Path, make_container: Callable[..., Path], content: str
) -> None:
    _limited(make_container)
    if content.startswith('{"time": 1,'):
        content = content.replace('"time": 1', f'"time": {time.time()}')
    _write(state_dir, content)
    series = scrape(CgpuCollector(state_dir))
    assert series[UP][labels()] == 0
    assert _errors(series)["corrupt"] == 1
    assert series[USED] == {TRAIN: 0}
    assert series["cgpu_container_gpu_memory_limit_bytes"][TRAIN] == GIB


def test_untrusted_files_are_not_read(
    state_dir: Path, make_container: Callable[..., Path], tmp_path: Path
) -> None:
    directory = _limited(make_container)
    good = json.dumps(_status({str(directory): FULL}))
    path = status_path(state_dir)
    collector = CgpuCollector(state_dir)

    def check(reason: str, count: int) -> None:
        series = scrape(collector)
        assert series[UP][labels()] == 0
        assert not series.get(HOST)
        assert _errors(series)[reason] == count

    # Writable by others: anyone could have written it.
    _write(state_dir, good, mode=0o666)
    check("untrusted", 1)
    # A symlink to a good file (where a container could point it), a FIFO (never blocks), a
    # directory, a file past the size limit.
    path.unlink()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(good)
    path.symlink_to(elsewhere)
    check("untrusted", 2)
    path.unlink()
    os.mkfifo(path)
    check("untrusted", 3)
    path.unlink()
    path.mkdir()
    check("untrusted", 4)
    path.rmdir()
    _write(state_dir, good[:-1] + " " * (9 << 20) + "}")
    check("untrusted", 5)
    # Unreadable: an I/O error, counted as such (root reads anything: nothing to see there).
    if os.geteuid() != 0:
        _write(state_dir, good, mode=0o200)
        check("io", 1)
    # Good again: back at once.
    path.unlink()
    _write(state_dir, good)
    assert scrape(collector)[HOST] == {TRAIN: 41.25}


def test_hostile_names_and_values_name_no_other_container(
    state_dir: Path, make_container: Callable[..., Path]
) -> None:
    directory = _limited(make_container)
    neighbour = _limited(make_container, "neighbour", namespace="ml", pod="q", container="serve")
    (neighbour / LEDGER_NAME).write_bytes(b"\0" * 64)  # it breaks its own ledger
    root = str(state_dir / "containers")
    entries: dict[str, Any] = {
        str(directory): FULL,
        # The host view stays on a container whose ledger is damaged.
        str(neighbour): {**FULL, "host_percent": 5.0, "over_compute": False},
        # Paths that are not a container directory of this state dir.
        f"{root}/../containers/capped": {**FULL, "host_percent": 99.0},
        f"{root}/capped/": {**FULL, "host_percent": 98.0},
        f"{root}-evil/capped": {**FULL, "host_percent": 97.0},
        f"{root}/gone": {**FULL, "host_percent": 96.0},
        f"{root}/capped\nfake": {**FULL, "host_percent": 95.0},
        f"{root}/.staging-capped-1": {**FULL, "host_percent": 94.0},
        "capped": {**FULL, "host_percent": 93.0},
        "/" + "a" * 5000: FULL,
        f"{root}/\u2028x": FULL,
    }
    doc = _status(entries)
    gpu = doc["gpus"][UUID0]
    doc["gpus"]["not a uuid\n"] = gpu
    doc["gpus"][UUID1] = {"containers": {str(directory): "not an object"}, "host_view": "yes"}
    _write(state_dir, doc)
    series = scrape(CgpuCollector(state_dir))
    serve = ctr("ml", "q", "serve", UUID0, "")
    assert series[HOST] == {TRAIN: 41.25, serve: 5.0}
    assert series[OVER] == {TRAIN: 1, serve: 0}
    assert _errors(series)["entry"] == 1  # one scrape met bad entries
    assert series[UP][labels()] == 1

    # Values of the wrong type or range: each such field is left out, the rest still counts.
    bad = {
        "limit": 30.5,
        "policy": "greedy",
        "share_percent": 1e9,
        "host_percent": -1,
        "out_of_turn_s": -5,
        "over_compute": "yes",
    }
    _write(state_dir, _status({str(directory): bad}))
    series = scrape(CgpuCollector(state_dir))
    assert series[USED] == {TRAIN: 0}  # no usable turns: the ledger's figure
    assert not series.get(HOST) and not series.get(OUT) and not series.get(OVER)
    text = json.dumps(_status({str(directory): {**FULL, "host_percent": "NaN"}}))
    _write(state_dir, text.replace('"NaN"', "NaN"))
    series = scrape(CgpuCollector(state_dir))
    assert not series.get(HOST) and all(math.isfinite(v) for v in series[OUT].values())


def test_no_arbiter_no_compute_host_series(
    state_dir: Path, make_container: Callable[..., Path]
) -> None:
    """Without a status file (no arbiter on the node) nothing is counted as an error."""
    _limited(make_container)
    series = scrape(CgpuCollector(state_dir))
    assert series[UP][labels()] == 0
    assert set(_errors(series).values()) == {0}
    assert series[USED] == {TRAIN: 0} and not series.get(HOST)


def test_a_best_effort_container_shows_its_policy_and_turns_without_a_limit(
    state_dir: Path, make_container: Callable[..., Path]
) -> None:
    """A container without a limit, on a GPU where another has one, takes turns as best effort:
    the arbiter's status says so, and the exporter shows its policy and its share of the turns
    (no limit series: it has none)."""
    make_container("capped", {UUID0: GIB, UUID1: GIB}, namespace="ml", pod="p", container="train")
    entry = {**FULL, "limit": 0, "policy": "best-effort", "share_percent": 12.5}
    _write(state_dir, _status({str(state_dir / "containers" / "capped"): entry}))
    series = scrape(CgpuCollector(state_dir))
    info = TRAIN | labels(policy="best-effort", priority="normal")
    assert series["cgpu_container_gpu_compute_info"] == {info: 1}
    assert series[USED] == {TRAIN: 12.5}
    assert LIMIT not in series or TRAIN not in series[LIMIT]
    assert _errors(series)["entry"] == 0  # best-effort is a policy the reader knows
