"""Fixtures: the fake API server, and extenders (in this process) reading it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kube.apiserver import FakeApiServer
from kube.fixtures import kube_api  # noqa: F401
from node_plugin import NodePlugin, run_node_plugin
from sched_peer import Extenders

from cgpu.scheduler.cli import Extender


@pytest.fixture
def extenders(kube_api: FakeApiServer, tmp_path: Path) -> Iterator[Extenders]:  # noqa: F811
    """Start extenders against `kube_api`; all are stopped after the test."""
    started = Extenders(kube_api, tmp_path / "kubeconfig")
    yield started
    started.stop_all()


@pytest.fixture
def extender(extenders: Extenders) -> Callable[..., Extender]:
    """Start one extender (keyword arguments go to cgpu.scheduler.cli.build) and wait for sync."""
    return extenders.start



@pytest.fixture
def node_plugin(kube_api: FakeApiServer, sim_env) -> Iterator[NodePlugin]:  # noqa: F811
    """The device plugin on node-1 as a process reading `kube_api`, with its kubelet peer."""
    with run_node_plugin(kube_api, sim_env) as plugin:
        yield plugin
