"""An arbiter its clients cannot stall (issue 34, item 3): hostile containers beside
well-behaved ones, against a real `cgpu compute-arbiter`.

The hostile clients are written from the wire format (hostile_kit.py), not from the shim. The
well-behaved containers are saturating processes that speak the protocol as the shim does and
record each turn they get (GRANT to REVOKE); a container's share of a 1 s window is the part of
it its turns cover, from the second window on. The goals are issue 34's (+-5 points; >= 60 for a
`share` 70 beside a flood); the bound here, TOL = 6, keeps one point of margin for a loaded
2-core CI machine, and one late turn is allowed as in tests/shim/test_compute_arbiter.py
(`hostile_kit.holds_rule`). These tests judge timing, so they live in tests/compute, which the
sanitizer runs of scripts/test.sh do not repeat.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from arbiter_kit import OTHER, UUID, ArbiterProcess, Client, make_container, process_state
from hostile_kit import (
    DONE,
    GRANT,
    REFUSE,
    REVOKE,
    SIZE,
    WANT,
    WIRE,
    Role,
    connect,
    connectable,
    cpu_seconds,
    dev,
    hello,
    holds_rule,
    packet,
    roles,
    shares,
    windows,
)

TOL = 6
CAP_AT_LEAST = 16  # a container of 16 processes needs 16 connections (tests/shim has one)
CAP_AT_MOST = 64  # "a small cap": far below what a flood opens
FLOOD_CPU = 0.5  # of one core: the arbiter used 99% under a flood before issue 34
LOG_GROWTH = 1 << 20  # bytes of log a flood may cause (at --log-level DEBUG)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "containers"


@pytest.fixture
def start(root: Path):
    started: list[ArbiterProcess] = []

    def make(*args: str, **options: object) -> ArbiterProcess:
        arbiter = ArbiterProcess(root, *args, **options)  # type: ignore[arg-type]
        started.append(arbiter)
        return arbiter

    yield make
    for arbiter in started:
        if arbiter.proc.poll() is None:
            arbiter.stop()


def _ready(arbiter: ArbiterProcess, *directories: Path) -> None:
    for directory in directories:
        arbiter.wait_for_socket(directory)
        connectable(directory, 10.0)


def _judge(name: str, holds: list, start: float, count: int, target: float, **kw) -> list:
    got = shares(holds, windows(start, count))
    why = holds_rule(got, target, TOL, **kw)
    assert not why, f"{name}: {why}"
    return got


def test_a_flooding_container_costs_its_neighbours_nothing(root: Path, start) -> None:
    """As many connections as it may, valid and malformed packets, reconnecting at once: its
    `fixed` 30 neighbour keeps 30, a `share` 70 one at least 60 (65 with the flooder's fixed 5
    used up); a new container's socket comes within 1 s; the arbiter's CPU stays bounded."""
    a = make_container(root, "a", {UUID: (30, "fixed")})
    b = make_container(root, "b", {UUID: (70, "share")})
    h = make_container(root, "h", {UUID: (5, "fixed")})
    arbiter = start()
    _ready(arbiter, a, b, h)
    seconds = 8
    # The flooder is niced: its CPU is its own cgroup's business, and on a 2-core machine an
    # unniced flooder would starve the measuring clients rather than test the arbiter.
    with roles(Role("saturate", str(a), UUID), Role("saturate", str(b), UUID)) as (sa, sb):
        time.sleep(0.3)
        with roles(Role("flood", UUID, str(h), nice=10)) as (flooder,):
            t0 = time.monotonic()
            cpu0, log0 = cpu_seconds(arbiter.proc.pid), arbiter.log.stat().st_size
            time.sleep(3.0)
            appeared = connectable(make_container(root, "new", {UUID: (10, "share")}), 5.0)
            time.sleep(max(0.0, t0 + seconds - time.monotonic()))
            cpu = (cpu_seconds(arbiter.proc.pid) - cpu0) / (time.monotonic() - t0)
            log_growth = arbiter.log.stat().st_size - log0
            counts = flooder.finish()
        holds_a, holds_b = sa.finish(), sb.finish()
    status = arbiter.read_status()
    print(
        f"\nflood: {counts}; arbiter CPU {cpu:.1%} of a core; log +{log_growth} B; "
        f"new socket in {appeared:.3f} s; bad_messages {status['bad_messages']}"
    )
    assert counts["connects"] >= 100 and counts["packets"] >= 10_000, counts  # it did flood
    fa = _judge("fixed 30", holds_a, t0 + 1, seconds - 1, 30)
    fb = _judge("share 70", holds_b, t0 + 1, seconds - 1, 65, at_least=True)
    print(f"fixed 30: {fa}\nshare 70: {fb}")
    assert appeared <= 1.0, f"the new container's socket came after {appeared:.2f} s"
    assert cpu <= FLOOD_CPU, f"the arbiter used {cpu:.0%} of a core under the flood"
    assert log_growth <= LOG_GROWTH, f"the flood wrote {log_growth} bytes of log"
    assert status["time"] > time.time() - 2.5  # its status is still written every second


def test_a_silent_holder_costs_its_neighbours_nothing(root: Path, start) -> None:
    """A container whose connections, once granted, never read or answer again (a new one
    each time): `fixed` 30 keeps 30 and `share` 70 keeps what the silent `fixed` 10 leaves."""
    a = make_container(root, "a", {UUID: (30, "fixed")})
    b = make_container(root, "b", {UUID: (70, "share")})
    s = make_container(root, "s", {UUID: (10, "fixed")})
    arbiter = start()
    _ready(arbiter, a, b, s)
    seconds = 8
    with roles(Role("saturate", str(a), UUID), Role("saturate", str(b), UUID)) as (sa, sb):
        time.sleep(0.3)
        with roles(Role("silent", UUID, str(s))) as (holder,):
            t0 = time.monotonic()
            time.sleep(seconds)
            counts = holder.finish()
        holds_a, holds_b = sa.finish(), sb.finish()
    status = arbiter.read_status()["gpus"][UUID]["containers"]
    print(f"\nsilent: {counts}; forced revokes {status[str(s)]['forced_revokes']}")
    assert counts["grants"] >= 3, counts  # it was granted, and went silent, again and again
    fa = _judge("fixed 30", holds_a, t0 + 1, seconds - 1, 30)
    fb = _judge("share 70", holds_b, t0 + 1, seconds - 1, 60, at_least=True)
    print(f"fixed 30: {fa}\nshare 70: {fb}")


@pytest.fixture(scope="module")
def mainexit(tmp_path_factory: pytest.TempPathFactory, cc: str) -> Path:
    """tests/compute/mainexit.c, built."""
    out = tmp_path_factory.mktemp("mainexit") / "mainexit"
    source = Path(__file__).with_name("mainexit.c")
    subprocess.run([cc, "-O1", "-pthread", "-o", str(out), str(source)], check=True)
    return out


def _start_mainexit(binary: Path, directory: Path, drain_ms: int) -> subprocess.Popen[str]:
    """mainexit, once its main thread has exited and its worker has connected."""
    proc = subprocess.Popen(
        [str(binary), str(directory), UUID, str(drain_ms)], stdout=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 5
    task = Path(f"/proc/{proc.pid}/task")
    # its main thread has exited (a zombie), its worker runs
    while process_state(proc.pid) != "Z" or len(list(task.iterdir())) != 2:
        assert proc.poll() is None, f"mainexit exited {proc.returncode}"
        assert time.monotonic() < deadline, "mainexit did not start"
        time.sleep(0.01)
    return proc


def _mainexit_holds(proc: subprocess.Popen[str]) -> list[list[float]]:
    """Its turns, [grant, DONE sent], from what it printed."""
    proc.kill()
    out, _ = proc.communicate(timeout=10)
    holds: list[list[float]] = []
    for line in out.splitlines():
        kind, at = line.split()
        if kind == "G":
            holds.append([float(at), float(at)])
        elif holds:
            holds[-1][1] = float(at)
    return holds


def _overlap(x: list, y: list) -> float:
    return sum(max(0.0, min(b, d) - max(a, c)) for a, b in x for c, d in y)


def test_a_process_whose_main_thread_exited_is_not_stopped(root: Path, start, mainexit) -> None:
    """Its main thread gone (a zombie in /proc/<pid>/stat), a worker thread keeps the
    connection and saturates, draining 30 ms at each REVOKE: it is not passed over as stopped
    (its neighbour is granted only after its DONE), and the two `share` 50 split the GPU."""
    m = make_container(root, "m", {UUID: (50, "share")})
    b = make_container(root, "b", {UUID: (50, "share")})
    arbiter = start("--quantum-ms", "50")  # a REVOKE waits 100 ms for its DONE
    _ready(arbiter, m, b)
    proc = _start_mainexit(mainexit, m, drain_ms=30)
    try:
        tasks = [p.name for p in Path(f"/proc/{proc.pid}/task").iterdir()]
        assert len(tasks) == 2, tasks  # the zombie main thread and the live worker
        seconds = 5
        with roles(Role("saturate", str(b), UUID)) as (sb,):
            t0 = time.monotonic()
            time.sleep(seconds)
            holds_b = sb.finish()
    finally:
        holds_m = _mainexit_holds(proc)
    cut = [h for h in holds_m if any(c < h[1] - 0.002 and d > h[1] for c, d in holds_b)]
    print(f"\nturns {len(holds_m)}, overlapping the neighbour's {len(cut)}")
    assert len(holds_m) >= 10, holds_m
    # a turn of it cut short (the neighbour granted before its DONE): at most one, where a
    # loaded machine stretched its 30 ms drain past the 100 ms deadline
    assert len(cut) <= 1, (cut, _overlap(holds_m, holds_b))
    _judge("main exited, share 50", holds_m, t0 + 1, seconds - 1, 50)
    _judge("share 50", holds_b, t0 + 1, seconds - 1, 50)


def test_a_stopped_process_whose_main_thread_exited_is_passed_over(
    root: Path, start, mainexit
) -> None:
    """Every thread stopped (SIGSTOP) while it holds, past its quantum: a neighbour that asks
    is granted at once, not after the revoke's deadline (2 quanta of 500 ms)."""
    m = make_container(root, "m", {UUID: (50, "share")})
    b = make_container(root, "b", {UUID: (50, "share")})
    arbiter = start("--quantum-ms", "500")
    _ready(arbiter, m, b)
    proc = _start_mainexit(mainexit, m, drain_ms=0)
    try:
        assert proc.stdout is not None
        assert select.select([proc.stdout], [], [], 5)[0], "mainexit was never granted"
        line = proc.stdout.readline()
        assert line.startswith("G "), (line, proc.poll(), arbiter.log.read_text()[-2000:])
        proc.send_signal(signal.SIGSTOP)
        for task in Path(f"/proc/{proc.pid}/task").iterdir():
            while process_state_of(task) not in "TZ":
                time.sleep(0.005)
        time.sleep(0.6)  # its quantum is over: a neighbour's WANT revokes it at once
        neighbour = Client(b).hello((0, UUID))
        asked = time.monotonic()
        neighbour.send(WANT, 0)
        neighbour.expect(GRANT, timeout=3.0)
        waited = time.monotonic() - asked
        assert waited < 0.3, f"granted after {waited:.2f} s: the stopped holder was waited for"
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()


def process_state_of(task: Path) -> str:
    """The state letter of a /proc/<pid>/task/<tid> directory's stat."""
    stat = (task / "stat").read_text()
    return stat[stat.rindex(")") + 2]


def test_an_arbiter_killed_mid_turn_and_started_again(root: Path, start) -> None:
    """SIGKILL while a container holds the GPU, and a new arbiter at once: the clients
    reconnect as the shim does, the GPU idles no more than 0.2 s (+0.1 margin) once the new
    arbiter answers, and every window from 1 s after that holds the shares."""
    a = make_container(root, "a", {UUID: (30, "fixed")})
    b = make_container(root, "b", {UUID: (70, "share")})
    arbiter = start()
    _ready(arbiter, a, b)
    after = 5
    with roles(Role("saturate", str(a), UUID), Role("saturate", str(b), UUID)) as (sa, sb):
        time.sleep(2.5)
        arbiter.proc.kill()  # the saturating clients always have a holder: mid-turn
        arbiter.proc.wait()
        killed = time.monotonic()
        start(log="arbiter-again.log")
        up = killed + connectable(a, 10.0)
        connectable(b, 5.0)
        time.sleep(max(0.0, up + 1 + after - time.monotonic()))
        holds_a, holds_b = sa.finish(), sb.finish()
    first = min(h[0] for h in holds_a + holds_b if h[0] >= killed)
    print(
        f"\nrestart: the new arbiter answered {up - killed:.2f} s after the kill, "
        f"the first grant {first - up:.3f} s after that"
    )
    assert first - up <= 0.3, f"the GPU idled {first - up:.2f} s after the new arbiter answered"
    fa = _judge("fixed 30", holds_a, up + 1, after, 30)
    fb = _judge("share 70", holds_b, up + 1, after, 70)
    print(f"fixed 30: {fa}\nshare 70: {fb}")


@contextlib.contextmanager
def _more_files() -> object:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _classify(conns: list[socket.socket], timeout: float) -> tuple[list, int, int]:
    """(served: answered REFUSE, closed by the arbiter, unanswered)."""
    served, closed, pending = [], 0, list(conns)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        ready, _, _ = select.select(pending, [], [], 0.05)
        for sock in ready:
            pending.remove(sock)
            try:
                data = sock.recv(SIZE + 1)
            except OSError:
                data = b""
            if len(data) == SIZE and WIRE.unpack(data)[0] == REFUSE:
                served.append(sock)
            else:
                closed += 1
    return served, closed, len(pending)


def test_connections_beyond_the_cap_are_closed_and_others_still_work(root: Path, start) -> None:
    """300 connections into one container: no more than a small cap are served (at least 16:
    a container needs one per process), the rest are closed or never accepted, and another
    container's connections, and the served ones, still work; closing them frees the cap."""
    a = make_container(root, "a", {UUID: (50, "share")})
    h = make_container(root, "h", {UUID: (50, "share")})
    arbiter = start()
    _ready(arbiter, a, h)
    conns: list[socket.socket] = []
    refused = 0
    with _more_files():
        try:
            for i in range(300):
                try:
                    sock = connect(h, blocking=False)
                    sock.send(hello())
                    sock.send(dev(1, OTHER))  # no limit there: REFUSE says it is served
                    conns.append(sock)
                except OSError:
                    refused += 1
                if i % 32 == 31:
                    time.sleep(0.02)
            served, closed, unanswered = _classify(conns, 3.0)
            print(
                f"\n300 connections: {len(served)} served, {closed} closed, "
                f"{unanswered} unanswered, {refused} refused at connect"
            )
            assert CAP_AT_LEAST <= len(served) <= CAP_AT_MOST, len(served)
            neighbour = Client(a).hello((0, UUID))
            neighbour.send(WANT, 0)
            neighbour.expect(GRANT)
            mine = served[0]
            mine.send(dev(0, UUID))
            mine.send(packet(WANT))
            # the neighbour is revoked for it, answers, and it is granted
            neighbour.send(DONE, 0, a=neighbour.expect(REVOKE).a)
            mine.settimeout(3.0)
            assert WIRE.unpack(mine.recv(SIZE + 1))[0] == GRANT
        finally:
            for sock in conns:
                sock.close()
        time.sleep(0.3)
        again = connect(h)
        again.sendall(hello())
        again.sendall(dev(1, OTHER))
        again.settimeout(3.0)
        assert WIRE.unpack(again.recv(SIZE + 1))[0] == REFUSE  # the cap is free again
        again.close()
    assert arbiter.proc.poll() is None


def test_out_of_file_descriptors_the_arbiter_neither_spins_nor_starves(root: Path, start) -> None:
    """RLIMIT_NOFILE 64 for the arbiter, and four containers that open connections as fast as
    they may: the arbiter does not spin on EMFILE, and `fixed` 30 and `share` 70 (connected
    before the flood) keep their shares."""
    a = make_container(root, "a", {UUID: (30, "fixed")})
    b = make_container(root, "b", {UUID: (70, "share")})
    hogs = [make_container(root, f"h{i}", {UUID: (5, "share")}) for i in range(4)]
    arbiter = start(nofile=64)
    _ready(arbiter, a, b, *hogs)
    seconds = 7
    with roles(Role("saturate", str(a), UUID), Role("saturate", str(b), UUID)) as (sa, sb):
        time.sleep(0.5)
        with roles(Role("hog", UUID, *map(str, hogs), nice=10)) as (hog,):
            t0 = time.monotonic()
            cpu0 = cpu_seconds(arbiter.proc.pid)
            time.sleep(seconds)
            cpu = (cpu_seconds(arbiter.proc.pid) - cpu0) / (time.monotonic() - t0)
            counts = hog.finish()
        holds_a, holds_b = sa.finish(), sb.finish()
    print(f"\nhog: {counts}; arbiter CPU {cpu:.1%} of a core")
    assert counts["refused"] + counts["closed"] > 0, counts  # it did run out of descriptors
    fa = _judge("fixed 30", holds_a, t0 + 1, seconds - 1, 30)
    fb = _judge("share 70", holds_b, t0 + 1, seconds - 1, 70)
    print(f"fixed 30: {fa}\nshare 70: {fb}")
    assert cpu <= FLOOD_CPU, f"the arbiter used {cpu:.0%} of a core out of descriptors"
    assert arbiter.proc.poll() is None


def test_no_other_host_user_reaches_a_container_socket(root: Path, start) -> None:
    """The containers root is closed to other users (an old 0755 one is closed by the arbiter):
    an unprivileged host user can neither connect to a container's compute.sock nor open its
    ledger; root, as the device plugin and exporter run, still can."""
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    a = make_container(root, "a", {UUID: (30, "fixed")})
    arbiter = start()
    _ready(arbiter, a)
    assert os.stat(root).st_mode & 0o077 == 0
    sock = str(a / "compute.sock")
    assert _connect_as(65534, sock) == "refused"  # nobody
    assert _connect_as(0, sock) == "connected"  # root, as the shim's tests connect


def _connect_as(uid: int, path: str) -> str:
    """Try to connect to `path` from a forked child running as `uid`."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            if uid:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                s.connect(path)
                code = 0
            except PermissionError:
                code = 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return {0: "connected", 3: "refused"}.get(os.waitstatus_to_exitcode(status), "failed")
