"""What the client matrix (tests/clients) and the real CUDA stack (tests/realstack) share: the
pins of a requirements file, the check that a pinned distribution is installed, and the
installed `cgpu` command."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest


def pinned(requirements: Path) -> dict[str, str]:
    """The `name==version` pins of a requirements file (comments and `deb:` lines left out)."""
    pins = {}
    for line in requirements.read_text().splitlines():
        name, sep, ver = line.strip().partition("==")
        if sep and name[:1].isalpha() and not name.startswith("deb:"):
            pins[name] = ver
    return pins


def installed(dist: str) -> str | None:
    """The installed version of `dist`, or None."""
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def require_pinned(dist: str, want: str, have: str | None) -> None:
    """Fail the test unless `dist` is installed (`have`) at its pinned version (`want`)."""
    if have != want:
        pytest.fail(f"{dist}=={want} is not installed ({have}): run scripts/install-clients.sh")


def cgpu_command() -> list[str]:
    """The installed `cgpu`, as a user runs it."""
    script = Path(sys.executable).parent / "cgpu"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "cgpu.cli"]
