"""Writing the files that tell a container runtime to call `cgpu hook`."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from cgpu.core.files import atomic_write


def cgpu_argv(explicit: str | None = None) -> list[str]:
    """The absolute command line that starts `cgpu` (a runtime calls hooks with no PATH)."""
    if explicit:
        return [os.path.abspath(explicit)]
    argv0 = Path(sys.argv[0])
    if argv0.name == "cgpu" and argv0.is_file():
        return [os.path.abspath(argv0)]
    found = shutil.which("cgpu")
    if found:
        return [os.path.abspath(found)]
    return [sys.executable, "-I", "-m", "cgpu.cli"]  # -I: not the runtime's cwd on sys.path


def oci_hook(argv: list[str], *args: str, timeout: int | None = None) -> dict[str, Any]:
    """An OCI hook object: `path` and `args` (which repeat argv[0], as execve wants)."""
    hook: dict[str, Any] = {"path": argv[0], "args": [Path(argv[0]).name, *argv[1:], *args]}
    if timeout:
        hook["timeout"] = timeout
    return hook


def write_json(path: str | os.PathLike[str], data: Any) -> Path:
    """Atomically write `data` as indented JSON to `path` (mode 0644); "-" writes to stdout."""
    text = json.dumps(data, indent=2) + "\n"
    if os.fspath(path) == "-":
        sys.stdout.write(text)
        return Path("-")
    return atomic_write(path, text)
