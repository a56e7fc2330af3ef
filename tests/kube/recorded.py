"""Recorded API-server JSON (tests/deviceplugin/data/) and fake API servers holding it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .apiserver import FakeApiServer

DATA = Path(__file__).resolve().parents[1] / "deviceplugin" / "data"


def load(name: str) -> dict[str, Any]:
    """A recorded API-server response, by file name under tests/deviceplugin/data/."""
    return json.loads((DATA / name).read_text())


def serve_recorded(pods: str, *nodes: str) -> FakeApiServer:
    """A fake API server holding the recorded PodList `pods` and the recorded Node(s) `nodes`."""
    server = FakeApiServer()
    try:
        server.load_list("pods", load(pods))
        for node in nodes:
            server.create("nodes", load(node))
    except Exception:
        server.close()
        raise
    return server
