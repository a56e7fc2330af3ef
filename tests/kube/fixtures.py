"""Fixtures: a running fake API server, closed after the test.

Use them from any test directory by importing them into that directory's conftest.py:
`from kube.fixtures import kube_api, recorded_api  # noqa: F401`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from .apiserver import FakeApiServer
from .recorded import serve_recorded


@pytest.fixture
def kube_api() -> Iterator[FakeApiServer]:
    """A fake API server on 127.0.0.1 (empty: add nodes and pods with `create`)."""
    server = FakeApiServer()
    yield server
    server.close()


@pytest.fixture
def recorded_api() -> Iterator[Callable[..., FakeApiServer]]:
    """Start fake API servers holding recorded JSON: `recorded_api("pods_x.json", "node.json")`."""
    servers: list[FakeApiServer] = []

    def start(pods: str, *nodes: str) -> FakeApiServer:
        server = serve_recorded(pods, *nodes)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()
