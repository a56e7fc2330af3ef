"""The contract names of `cgpu.core.layout` are read under the names layout.py gives them.

A module that imports `GPU_MEM as RESOURCE`, or writes `DRIVER = DRA_DRIVER`, makes the reader
look up what `RESOURCE` is, and lets two modules call one name two things. This scans every module
of the installed package for either form.
"""

from __future__ import annotations

import ast

from package_files import package_modules

from cgpu.core import layout

KNOWN: set[tuple[str, str]] = set()  # none left (issue 37)


def renames(source: str) -> list[str]:
    """`X as Y` for each layout name imported under another name, `Y = X` for each one bound to
    another module-level name."""
    names = {n for n in vars(layout) if n.isupper()}
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.module == "cgpu.core.layout":
            renamed = [a for a in node.names if a.asname not in (None, a.name)]
            found += [f"{a.name} as {a.asname}" for a in renamed]
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Name)
            and node.value.id in names
        ):
            found += [f"{t.id} = {node.value.id}" for t in node.targets if isinstance(t, ast.Name)]
    return found


def test_the_scan_finds_both_forms() -> None:
    source = (
        "from cgpu.core.layout import GPU_MEM as RESOURCE, GPU_CORE\n"
        "from cgpu.core.layout import GPU_COUNT as GPU_COUNT\n"
        "DRIVER = DRA_DRIVER\n"
        "LIMIT = 4\n"
    )
    assert renames(source) == ["GPU_MEM as RESOURCE", "DRIVER = DRA_DRIVER"]


def test_no_module_renames_a_layout_name() -> None:
    found = {
        (module, rename)
        for module, path in package_modules()
        if module != layout.__name__  # its own aliases: one string, two roles
        for rename in renames(path.read_text())
    }
    assert found <= KNOWN, f"use these names as cgpu.core.layout spells them: {found - KNOWN}"
