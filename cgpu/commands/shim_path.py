"""`cgpu shim-path`: print the installed shim's absolute path."""

from __future__ import annotations

import argparse
import sys

from cgpu.core.paths import shim_path


def register(parser: argparse.ArgumentParser) -> None:
    """No options."""


def run(args: argparse.Namespace) -> int:
    """Print the path; fail if the shim is not installed."""
    path = shim_path()
    if not path.is_file():
        print(f"cgpu: shim not found at {path}; reinstall cgpu", file=sys.stderr)
        return 1
    print(path)
    return 0
