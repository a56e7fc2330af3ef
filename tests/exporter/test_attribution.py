"""Attribution rules and enforcement decisions, on host facts given as data.

The facts a real /proc gives are fed in through the Attributor's inspector, so each rule, and
each way a container could try to frame another, is checked on its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from exporter_helpers import MIB, UUID0

from cgpu.core.hostview import Attributor, ContainerUsage, GpuProcess, HostView, ProcessCache
from cgpu.core.ledger import DeviceUsage, ProcessUsage
from cgpu.core.procinfo import HostProcess, inspect
from cgpu.exporter.enforce import Enforcer

HOST_NS = 4026531836
CID_A = "a" * 64
CID_B = "b" * 64


def _container(
    key: str,
    ledger_id: tuple[int, int] | None = None,
    slots: tuple[tuple[int, int], ...] = (),
    limit: int = 100 * MIB,
    **meta: Any,
) -> ContainerUsage:
    return ContainerUsage(
        key,
        meta,
        (DeviceUsage(UUID0, limit, 0, 0, 0),),
        tuple(ProcessUsage(pid, start) for pid, start in slots),
        ledger_id,
    )


def _fact(
    pid: int,
    ns: int,
    nspid: int | None = None,
    ledger: tuple[int, int] | None = None,
    cgroup: str = "0::/\n",
    start: int = 1000,
) -> HostProcess:
    return HostProcess(pid, start, nspid if nspid is not None else pid, ns, cgroup, ledger)


def _attribute(
    containers: list[ContainerUsage], facts: list[HostProcess], used: Mapping[int, int]
) -> HostView:
    by_pid = {f.pid: f for f in facts}
    attributor = Attributor(
        ProcessCache(inspector=by_pid.get), host_pidns=HOST_NS, read_start_time=lambda pid: None
    )
    procs = [GpuProcess(pid, used.get(pid, MIB)) for pid in by_pid]
    return attributor.attribute(containers, {UUID0: procs})


def _owners(view: HostView) -> dict[int, tuple[str, bool]]:
    return {p.pid: (key, p.trusted) for (key, _), ps in view.processes.items() for p in ps}


def test_the_ledger_mount_places_a_process_and_its_namespace() -> None:
    a = _container("a", ledger_id=(1, 10))
    b = _container("b", ledger_id=(1, 20))
    facts = [
        _fact(100, ns=7, nspid=1, ledger=(1, 10)),  # a's process that sees a's ledger
        _fact(101, ns=7, nspid=5),  # a's process that unmounted /var/run/cgpu
        _fact(200, ns=8, nspid=1, ledger=(1, 20)),
        _fact(300, ns=9, nspid=1),  # nobody's
    ]
    view = _attribute([a, b], facts, {100: 10 * MIB, 101: 5 * MIB, 200: 7 * MIB, 300: 3 * MIB})
    assert _owners(view) == {100: ("a", True), 101: ("a", True), 200: ("b", True)}
    assert view.used("a", UUID0) == 15 * MIB and view.used("b", UUID0) == 7 * MIB
    assert view.unattributed[UUID0] == 3 * MIB


def test_a_ledger_cannot_claim_a_process_the_host_places_elsewhere() -> None:
    # The hostile container writes a live slot with the victim's in-namespace pid and start.
    victim = _container("victim", ledger_id=(1, 20))
    hostile = _container("hostile", ledger_id=(1, 10), slots=((1, 1000), (5, 1000)))
    facts = [
        _fact(200, ns=8, nspid=1, ledger=(1, 20)),  # placed by its mount
        _fact(201, ns=8, nspid=5),  # placed by its namespace
    ]
    view = _attribute([victim, hostile], facts, {})
    assert _owners(view) == {200: ("victim", True), 201: ("victim", True)}
    assert view.used("hostile", UUID0) == 0


def test_ledger_slots_place_only_what_the_host_does_not_and_never_trusted() -> None:
    # `cgpu run` style: processes in the host's namespace, found by their ledger slot only.
    run = _container("run-1", slots=((400, 1000),))
    other = _container("other", ledger_id=(1, 20))
    facts = [
        _fact(400, ns=HOST_NS),
        _fact(401, ns=HOST_NS),  # no slot anywhere
        _fact(200, ns=HOST_NS, ledger=(1, 20)),  # host namespace: never a namespace anchor
    ]
    view = _attribute([run, other], facts, {})
    assert _owners(view) == {400: ("run-1", False), 200: ("other", True)}
    assert view.used("run-1", UUID0, trusted_only=True) == 0
    # Two ledgers claiming the same process: neither gets it.
    twin = _container("twin", slots=((400, 1000),))
    view = _attribute([run, other, twin], facts, {})
    assert 400 not in _owners(view)


def test_a_shared_pod_namespace_is_no_anchor_and_limits_ledger_claims() -> None:
    a = _container("a", ledger_id=(1, 10), slots=((3, 1000),))
    b = _container("b", ledger_id=(1, 20))
    outsider = _container("outsider", slots=((4, 1000),))
    facts = [
        _fact(100, ns=7, nspid=1, ledger=(1, 10)),
        _fact(200, ns=7, nspid=2, ledger=(1, 20)),
        _fact(300, ns=7, nspid=3),  # claimed by a's ledger: a is one of the namespace's owners
        _fact(301, ns=7, nspid=4),  # claimed by a container the namespace does not hold
        _fact(302, ns=7, nspid=9),
    ]
    view = _attribute([a, b, outsider], facts, {})
    assert _owners(view) == {100: ("a", True), 200: ("b", True), 300: ("a", False)}


def test_cgroup_names_the_container_and_contradictions_place_nothing() -> None:
    a = _container("a", ledger_id=(1, 10), container_id=CID_A)
    b = _container("b", ledger_id=(1, 20), container_id=CID_B)
    short = _container("short", container_id="abc")  # too short to be matched
    facts = [
        _fact(100, ns=7, cgroup=f"0::/kubepods/burstable/pod1/cri-containerd-{CID_A}.scope\n"),
        _fact(200, ns=8, cgroup=f"0::/docker/{CID_B}\n"),
        _fact(300, ns=9, ledger=(1, 10), cgroup=f"0::/docker/{CID_B}\n"),
        _fact(400, ns=10, cgroup="0::/abc\n"),
        _fact(500, ns=11, cgroup=f"0::/x-{CID_A}-y\n"),
    ]
    view = _attribute([a, b, short], facts, {})
    assert _owners(view) == {100: ("a", True), 200: ("b", True)}


def test_the_hooks_init_process_anchors_its_namespace() -> None:
    me = os.getpid()
    fact = inspect(me)
    assert fact is not None and fact.pidns is not None
    hooked = _container("hooked", init_pid=me, init_start_time=fact.start_time)
    stale = _container("stale", init_pid=me, init_start_time=fact.start_time + 1)
    attributor = Attributor(ProcessCache(), host_pidns=fact.pidns + 1)  # pretend: not the host
    view = attributor.attribute([hooked, stale], {UUID0: [GpuProcess(me, 5 * MIB)]})
    assert _owners(view) == {me: ("hooked", True)}


def test_real_proc_facts_for_this_process() -> None:
    fact = inspect(os.getpid())
    assert fact is not None
    assert fact.nspid == os.getpid() and fact.pidns == os.stat("/proc/self/ns/pid").st_ino
    assert fact.ledger_id is None  # this test runs with no /var/run/cgpu
    assert inspect(2**22 + 12345) is None


class _Kills:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, pid: int, started: int) -> bool:
        self.calls.append(pid)
        return True


def _view(entries: dict[str, list[tuple[int, int, bool]]]) -> HostView:
    from cgpu.core.hostview import Attributed

    view = HostView(gpus={UUID0})
    for key, procs in entries.items():
        view.processes[(key, UUID0)] = [Attributed(p, 1000, u, t) for p, u, t in procs]
    return view


def test_enforcer_waits_for_continuous_overuse_and_spares_the_rest() -> None:
    now = [0.0]
    kills = _Kills()
    enforcer = Enforcer(grace=30, allowance=10 * MIB, kill=kills, clock=lambda: now[0])
    over = _container("over", limit=100 * MIB)
    fine = _container("fine", limit=100 * MIB)
    containers = [over, fine]
    over_view = _view(
        {
            "over": [(1, 100 * MIB, True), (2, 20 * MIB, True), (3, 0, True)],
            "fine": [(9, 105 * MIB, True)],  # within slice + allowance
        }
    )
    under_view = _view({"over": [(1, 100 * MIB, True)], "fine": [(9, 105 * MIB, True)]})

    def labels(key: str, uuid: str) -> tuple[str, str, str, str, str]:
        return ("ns", "pod", key, uuid, "0")

    assert enforcer.check(containers, over_view, labels) == []
    now[0] = 20
    assert enforcer.check(containers, under_view, labels) == []  # the period ends here
    now[0] = 40
    assert enforcer.check(containers, over_view, labels) == []  # a new one starts
    now[0] = 69
    assert enforcer.check(containers, over_view, labels) == []
    now[0] = 70
    assert enforcer.check(containers, over_view, labels) == [1, 2]  # not pid 3: holds nothing
    assert kills.calls == [1, 2]
    assert enforcer.kills == {("ns", "pod", "over", UUID0, "0"): 2}


def test_enforcer_never_kills_on_a_containers_own_claims() -> None:
    now = [0.0]
    kills = _Kills()
    enforcer = Enforcer(grace=1, allowance=0, kill=kills, clock=lambda: now[0])
    container = _container("c", limit=100 * MIB)
    # Over only with a process placed by the container's own ledger: no kill, ever.
    view = _view({"c": [(1, 80 * MIB, True), (2, 80 * MIB, False)]})
    for t in (0, 5, 10):
        now[0] = t
        assert enforcer.check([container], view, lambda k, u: ("", "", k, u, "")) == []
    assert kills.calls == []
