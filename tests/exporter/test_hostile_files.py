"""Hostile container files: whatever a container leaves in its directory costs only its own series.

Good containers (live processes charging their ledgers) sit beside hostile ones whose
`cgpu.ledger`, `cgpu.conf` and `meta.json` are rewritten in a loop, from another thread, with
random bytes, truncations (in place, while the exporter may be reading), UUIDs that are not
UTF-8, and other file types (FIFOs, symlinks, directories, huge files). Meanwhile the real
`cgpu exporter` is scraped over HTTP and `cgpu ledger` runs again and again.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from exporter_helpers import GIB, MIB, UUID0, UUID1, ctr
from exporter_proc import Exporter, python_env

DURATION = 6.0
GOOD = {"good-a": 96 * MIB, "good-b": 200 * MIB, "good-c": 3 * MIB}
HOSTILE = [f"evil-{i}" for i in range(8)]

pytestmark = pytest.mark.slow


def _replace(path: Path, make: Callable[[Path], None]) -> None:
    """Remove whatever is at `path` (file, link, FIFO or tree) and make something new there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
    with contextlib.suppress(FileExistsError):  # raced by another step: the next one retries
        make(path)


class Vandal(threading.Thread):
    """Rewrites the hostile containers' files until stopped; every step is one random attack."""

    def __init__(
        self, dirs: list[Path], template: bytes, victim: Path, seed: int, in_place: bool
    ) -> None:
        super().__init__(daemon=True)
        self.dirs = dirs
        self.template = template
        self.victim = victim
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.steps = 0
        uuid_at = template.find(UUID0.encode())
        bad = b"\xff\xfe\x80GPU-\xc3\x28" + bytes([0x80 + i for i in range(20)])
        self.bad_uuid = template[:uuid_at] + bad + template[uuid_at + len(bad) :]
        self.attacks: list[Callable[[Path], None]] = [
            self.ledger_truncate_in_place if in_place else self.ledger_truncated_copy
        ]
        if not in_place:
            self.attacks += [
                self.ledger_random,
                self.ledger_bad_uuid,
                self.ledger_other_type,
                self.ledger_huge,
                self.meta_garbage,
                self.conf_garbage,
            ]

    def run(self) -> None:
        while not self.stop.is_set():
            target = self.rng.choice(self.dirs)
            # e.g. the FIFO vanished between two steps: the attack is void, not the test
            with contextlib.suppress(OSError):
                self.rng.choice(self.attacks)(target)
            self.steps += 1

    def _bytes(self, n: int) -> bytes:
        return self.rng.randbytes(n)

    def _rewrite(self, path: Path, data: bytes) -> None:
        """Replace the file's content: as a new file renamed in place."""
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        tmp = path.with_name(f".{path.name}.{self.rng.randrange(1 << 30)}")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def ledger_random(self, d: Path) -> None:
        size = self.rng.choice([0, 7, 16, 100, len(self.template), 300_000])
        data = self._bytes(size)
        if self.rng.random() < 0.5:  # keep the magic: garbage past a plausible header
            data = self.template[:16] + data[16:]
        self._rewrite(d / "cgpu.ledger", data)

    def ledger_truncated_copy(self, d: Path) -> None:
        self._rewrite(d / "cgpu.ledger", self.template[: self.rng.randrange(len(self.template))])

    def ledger_truncate_in_place(self, d: Path) -> None:
        path = d / "cgpu.ledger"
        if not path.is_file() or path.is_symlink():
            self._rewrite(path, self.template)
        for _ in range(20):  # shrink and grow the same inode under any reader
            os.truncate(path, self.rng.randrange(0, len(self.template) + 1))
            with open(path, "r+b") as f:
                f.write(self.template)

    def ledger_bad_uuid(self, d: Path) -> None:
        self._rewrite(d / "cgpu.ledger", self.bad_uuid)

    def ledger_other_type(self, d: Path) -> None:
        kind = self.rng.choice(["fifo", "dir", "victim", "zero", "dangling"])
        makers: dict[str, Callable[[Path], None]] = {
            "fifo": os.mkfifo,
            "dir": lambda p: p.mkdir(),
            "victim": lambda p: p.symlink_to(self.victim),
            "zero": lambda p: p.symlink_to("/dev/zero"),
            "dangling": lambda p: p.symlink_to("/nonexistent/cgpu.ledger"),
        }
        _replace(d / "cgpu.ledger", makers[kind])

    def ledger_huge(self, d: Path) -> None:
        path = d / "cgpu.ledger"
        self._rewrite(path, self.template)
        os.truncate(path, 1 << 40)  # sparse: a valid header in a terabyte file

    def meta_garbage(self, d: Path) -> None:
        path = d / "meta.json"
        choice = self.rng.randrange(7)
        if choice == 0:
            self._rewrite(path, self._bytes(self.rng.randrange(1, 4096)))
        elif choice == 1:
            _replace(path, os.mkfifo)
        elif choice == 2:
            _replace(path, lambda p: p.symlink_to("/dev/zero"))
        elif choice == 3:
            self._rewrite(path, b"[" * 200_000)
        elif choice == 4:
            self._rewrite(path, b'{"namespace": "' + b"x" * (2 << 20) + b'"}')
        elif choice == 5:
            wrong = {"namespace": 5, "device_ids": {"a": 1}, "created": "x", "pod": ["p"]}
            self._rewrite(path, json.dumps(wrong).encode())
        else:
            self._rewrite(path, b'{"namespace": "\xff\xfe"}')

    def conf_garbage(self, d: Path) -> None:
        path = d / "cgpu.conf"
        choice = self.rng.randrange(5)
        if choice == 0:
            self._rewrite(path, self._bytes(self.rng.randrange(1, 9000)))
        elif choice == 1:
            _replace(path, os.mkfifo)
        elif choice == 2:
            _replace(path, lambda p: p.mkdir())
        elif choice == 3:
            self._rewrite(path, b"version 1\ndevice GPU-\xff\xfe 1GiB\n")
        else:
            self._rewrite(path, b"version 1\ndevice " + UUID0.encode() + b" 999999GiB\n")


class Sweeper(threading.Thread):
    """The device plugin's clean-up and `cgpu hook sweep`, in a loop over the same directories.

    With an endless grace and no pod known, no directory is stale: every pass must read every
    directory, keep them all, and never raise.
    """

    def __init__(self, state_dir: Path) -> None:
        super().__init__(daemon=True)
        self.state_dir = state_dir
        self.stop = threading.Event()
        self.passes = 0
        self.failures: list[str] = []

    def run(self) -> None:
        from cgpu.deviceplugin.plugin import cleanup as plugin_cleanup
        from cgpu.hooks import sweep as hook_sweep

        while not self.stop.is_set():
            try:
                removed = hook_sweep.sweep(self.state_dir)
                removed += plugin_cleanup.sweep(self.state_dir, {}, set(), grace=1e9)
            except Exception as exc:  # the failure under test
                self.failures.append(repr(exc))
                continue
            if removed:
                self.failures.append(f"removed {removed}")
            self.passes += 1


class LedgerCommand(threading.Thread):
    """Runs `cgpu ledger` (text and --json) in a loop; records every failure."""

    def __init__(self, state_dir: Path, env: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.state_dir = state_dir
        self.env = env
        self.stop = threading.Event()
        self.runs = 0
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            as_json = self.runs % 2 == 1
            argv = [sys.executable, "-m", "cgpu.cli", "ledger", "--state-dir", str(self.state_dir)]
            done = subprocess.run(
                argv + (["--json"] if as_json else []),
                env=self.env,
                capture_output=True,
                timeout=60,
            )
            self.runs += 1
            problem = ""
            if done.returncode not in (0, 1) or b"Traceback" in done.stderr:
                problem = f"exit {done.returncode}: {done.stderr.decode(errors='replace')[-1500:]}"
            elif as_json:
                keys = {r["key"] for r in json.loads(done.stdout)}
                if not set(GOOD) <= keys:
                    problem = f"good containers missing from --json: {sorted(keys)}"
            elif not all(k.encode() in done.stdout for k in GOOD):
                problem = f"good containers missing: {done.stdout.decode()[-1500:]}"
            if problem:
                self.failures.append(problem)


def _run_fuzz(
    in_place: bool,
    tmp_path: Path,
    state_dir: Path,
    make_container: Callable[..., Path],
    hold: Callable[..., object],
    sim_env: Callable[..., dict[str, str]],
) -> None:
    for key, used in GOOD.items():
        d = make_container(
            key, {UUID0: GIB, UUID1: 2 * GIB}, namespace="team", pod=key, container="main"
        )
        hold(d / "cgpu.ledger", {0: used})
    hostile = [
        make_container(key, {UUID0: GIB}, namespace="evil", pod=key, container="c")
        for key in HOSTILE
    ]
    template = (hostile[0] / "cgpu.ledger").read_bytes()
    victim = state_dir / "containers" / "good-a" / "cgpu.ledger"
    env = sim_env(devices=2, uuids=f"{UUID0},{UUID1}")
    exporter = Exporter(state_dir, tmp_path / "exporter.log", env)
    seed = int(os.environ.get("CGPU_FUZZ_SEED", "11"))
    vandal = Vandal(hostile, template, victim, seed, in_place)
    ledger_cmd = LedgerCommand(state_dir, python_env(env))
    sweeper = Sweeper(state_dir)
    expected = {}
    for key, used in GOOD.items():
        expected[("used", ctr("team", key, "main", UUID0, "0"))] = used
        expected[("used", ctr("team", key, "main", UUID1, "1"))] = 0
        expected[("limit", ctr("team", key, "main", UUID0, "0"))] = GIB
        expected[("limit", ctr("team", key, "main", UUID1, "1"))] = 2 * GIB

    scrapes = 0
    try:
        vandal.start()
        ledger_cmd.start()
        sweeper.start()
        deadline = time.monotonic() + DURATION
        series: dict = {}
        while time.monotonic() < deadline:
            try:
                series = exporter.scrape()
            except OSError as exc:
                code = exporter.proc.poll()
                pytest.fail(f"scrape {scrapes + 1} failed ({exc}); exporter exit status {code}")
            scrapes += 1
            used = series["cgpu_container_gpu_memory_used_bytes"]
            limit = series["cgpu_container_gpu_memory_limit_bytes"]
            got = {("used", k): v for k, v in used.items() if dict(k)["namespace"] == "team"}
            got |= {("limit", k): v for k, v in limit.items() if dict(k)["namespace"] == "team"}
            assert got == expected, f"scrape {scrapes}"
            # A hostile container never shows up under a good container's labels.
            for k in limit:
                assert dict(k)["namespace"] == "team" or dict(k)["pod"] not in GOOD, k
    finally:
        vandal.stop.set()
        ledger_cmd.stop.set()
        sweeper.stop.set()
        sweeper.join(30)
        vandal.join(30)
        ledger_cmd.join(90)
        code = exporter.stop()
    log = exporter.log.read_text()
    assert code == 0, f"the exporter died ({code}):\n{log[-3000:]}"
    assert "Traceback" not in log, log[-3000:]
    assert scrapes >= 20 and vandal.steps >= 200, (scrapes, vandal.steps)
    assert ledger_cmd.runs >= 2 and not ledger_cmd.failures, ledger_cmd.failures[:3]
    assert sweeper.passes >= 10 and not sweeper.failures, sweeper.failures[:3]
    errors = {dict(k)["reason"]: v for k, v in series["cgpu_ledger_errors_total"].items()}
    expected_reasons = {"truncated"} if in_place else {"foreign", "truncated", "io", "config"}
    assert all(errors[r] > 0 for r in expected_reasons), errors


def test_hostile_files_cost_only_their_own_series(
    tmp_path: Path,
    state_dir: Path,
    make_container: Callable[..., Path],
    hold: Callable[..., object],
    sim_env: Callable[..., dict[str, str]],
) -> None:
    """Random bytes, truncated copies, bad UUIDs, other file types, huge files, bad meta/conf."""
    _run_fuzz(False, tmp_path, state_dir, make_container, hold, sim_env)


def test_ledgers_truncated_in_place_while_read(
    tmp_path: Path,
    state_dir: Path,
    make_container: Callable[..., Path],
    hold: Callable[..., object],
    sim_env: Callable[..., dict[str, str]],
) -> None:
    """The same inode shrinks and grows under the exporter and `cgpu ledger`.

    This needs the C reader that snapshots with pread instead of reading through a mapping
    (a mapping past the end of a shrunk file raises SIGBUS).
    """
    _run_fuzz(True, tmp_path, state_dir, make_container, hold, sim_env)


def test_every_kind_of_damage_is_counted_by_reason(
    tmp_path: Path,
    state_dir: Path,
    make_container: Callable[..., Path],
    sim_env: Callable[..., dict[str, str]],
) -> None:
    good = make_container("good", {UUID0: GIB}, namespace="team", pod="good", container="c")
    template = (good / "cgpu.ledger").read_bytes()
    uuid_at = template.find(UUID0.encode())

    def hostile(key: str) -> Path:
        return make_container(key, {UUID0: GIB}, namespace="evil", pod=key, container="c")

    (hostile("foreign") / "cgpu.ledger").write_bytes(os.urandom(len(template)))
    (hostile("truncated") / "cgpu.ledger").write_bytes(template[:100])
    bad = template[:uuid_at] + b"\xff\xfe\x80" + template[uuid_at + 3 :]
    (hostile("corrupt") / "cgpu.ledger").write_bytes(bad)
    fifo = hostile("fifo") / "cgpu.ledger"
    fifo.unlink()
    os.mkfifo(fifo)
    (hostile("config") / "cgpu.conf").write_bytes(b"version 1\ndevice \xff 1\n")
    meta = hostile("meta") / "meta.json"
    meta.unlink()
    os.mkfifo(meta)

    exporter = Exporter(state_dir, tmp_path / "exporter.log", sim_env())
    try:
        first, second = exporter.scrape(), exporter.scrape()
    finally:
        assert exporter.stop() == 0
    skipped = {dict(k)["reason"]: v for k, v in second["cgpu_ledgers_skipped"].items()}
    assert skipped == {
        "foreign": 1,
        "truncated": 1,
        "corrupt": 1,
        "io": 1,
        "config": 1,
        "meta": 1,
        "version": 0,
    }
    totals = {dict(k)["reason"]: v for k, v in second["cgpu_ledger_errors_total"].items()}
    assert totals == {reason: 2 * n for reason, n in skipped.items()}
    used = first["cgpu_container_gpu_memory_used_bytes"]
    # The meta.json FIFO costs only the labels: that container is still shown, under its key.
    assert {(dict(k)["pod"], dict(k)["container"]) for k in used} == {("good", "c"), ("", "meta")}
    # A damaged ledger costs the ledger's series; the host view still covers the container
    # (its slice is the host's cgpu.conf). A broken cgpu.conf costs everything.
    assert first["cgpu_container_gpu_memory_limit_bytes"].keys() == used.keys()
    host = first["cgpu_container_gpu_memory_host_used_bytes"]
    assert {dict(k)["pod"] for k in host} == {"good", "", "foreign", "truncated", "corrupt", "fifo"}
