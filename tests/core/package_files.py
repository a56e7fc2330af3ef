"""The installed package's Python files, wherever an install keeps them.

A wheel keeps every part inside the `cgpu` folder; the development install maps `cgpu.deviceplugin`
and `cgpu.hooks` to the checkout's deviceplugin/ and hooks/ (scripts/dev_finder.py).
"""

from __future__ import annotations

import importlib
from pathlib import Path

ROOT_PACKAGES = ("cgpu", "cgpu.deviceplugin", "cgpu.hooks")


def package_modules() -> list[tuple[str, Path]]:
    """(module name, file) for every module of the package, each once, sorted by name."""
    out: dict[str, Path] = {}
    for root_name in ROOT_PACKAGES:
        root = Path(importlib.import_module(root_name).__file__).resolve().parent
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            out.setdefault(".".join((root_name, *rel.parts)).removesuffix(".__init__"), path)
    return sorted(out.items())
