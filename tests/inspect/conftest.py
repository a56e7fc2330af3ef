"""Fixtures: the fake API server, and running the installed kubectl plugin against it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from kube.apiserver import FakeApiServer
from kube.fixtures import kube_api  # noqa: F401

SCRIPTS = Path(sys.executable).parent


@pytest.fixture
def inspect_cli(
    kube_api: FakeApiServer,  # noqa: F811
    tmp_path: Path,
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run `kubectl-inspect-cgpu ARGS` (or another script name) with KUBECONFIG at the server."""
    kubeconfig = kube_api.kubeconfig(tmp_path / "kubeconfig")

    def run(*args: str, script: str = "kubectl-inspect-cgpu", env: dict | None = None):
        environ = {**os.environ, "KUBECONFIG": str(kubeconfig), **(env or {})}
        return subprocess.run(
            [str(SCRIPTS / script), *args],
            env=environ,
            capture_output=True,
            text=True,
            timeout=60,
        )

    return run
