"""The `kube_api` fixture: a running fake API server, closed after the test.

Use it from any test directory by importing it into that directory's conftest.py:
`from kube.fixtures import kube_api  # noqa: F401`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .apiserver import FakeApiServer


@pytest.fixture
def kube_api() -> Iterator[FakeApiServer]:
    """A fake API server on 127.0.0.1 (empty: add nodes and pods with `create`)."""
    server = FakeApiServer()
    yield server
    server.close()
