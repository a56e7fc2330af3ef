"""Every contract name (resource, annotation, variable, path, driver) has one home.

`cgpu.core.layout` defines them; every other module imports them. This scans the string
constants of every module of the installed package (the device plugin and the hooks included),
leaving out docstrings, and fails where one of the home's names is written out again:
- a constant equal to a name (`"aliyun.com/gpu-mem"`, `"NVIDIA_VISIBLE_DEVICES"`);
- a constant that starts with a name followed by `=` (a hand-built `NAME=value` or
  `aliyun.com/gpu-count=2`), f-string pieces included.
A name that is a plain word (`containers`, `hook`, `run`) cannot be told from ordinary words in
code (a pod spec's `"containers"` key), so only names with a `.`, `/` or `_` are checked.
Prose that mentions a name in the middle of a message is allowed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from package_files import package_modules

import cgpu
from cgpu.core import layout

PACKAGE_DIR = Path(cgpu.__file__).resolve().parent
HOME = PACKAGE_DIR / "core" / "layout.py"
DISTINCT = re.compile(r"[./_]")


def contract_names() -> set[str]:
    """The home's names that can be told apart from ordinary words."""
    names: set[str] = set()
    for attr, value in vars(layout).items():
        if not attr.isupper():
            continue
        if isinstance(value, str):
            names.add(value)
        elif isinstance(value, dict):
            for item in value.values():
                names.update(item if isinstance(item, tuple) else (item,))
    return {n for n in names if isinstance(n, str) and DISTINCT.search(n)}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants of the module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(
            node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        ) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def offences(source: str, names: set[str]) -> list[tuple[int, str]]:
    """(line, literal) for each string constant in `source` that writes a name out again."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
            continue
        if id(node) in skip:
            continue
        text = node.value
        if text in names or any(text.startswith(f"{name}=") for name in names):
            found.append((node.lineno, text))
    return found


def _modules() -> list[tuple[str, Path]]:
    return [
        (name, path)
        for name, path in package_modules()
        if path != HOME and "_pb2" not in path.name
    ]


def test_the_home_holds_the_contract_names() -> None:
    names = contract_names()
    for expected in (
        "aliyun.com/gpu-mem",
        "aliyun.com/gpu-count",
        "aliyun.com/gpu-core.percentage",
        "ALIYUN_COM_GPU_MEM_IDX",
        "ALIYUN_COM_GPU_MEM_ASSIGNED",
        "ALIYUN_COM_GPU_MEM_ASSUME_TIME",
        "ALIYUN_COM_GPU_MEM_CONTAINER",
        "volcano.sh/gpu-memory",
        "VOLCANO_GPU_ALLOCATED",
        "NVIDIA_VISIBLE_DEVICES",
        "CGPU_LEDGER_DIR",
        "CGPU_COMPUTE_LIMIT",
        "gpu.cgpu.io",
        "cgpu.conf",
        "cgpu.ledger",
        "meta.json",
    ):
        assert expected in names
    assert layout.CONTAINERS_SUBDIR == "containers"


def test_the_scan_covers_every_part() -> None:
    parts = {name.split(".")[1] for name, _ in _modules() if "." in name}
    assert {"deviceplugin", "hooks", "dra", "exporter", "scheduler", "inspect"} <= parts


def test_the_scan_finds_a_literal_and_spares_docstrings() -> None:
    names = contract_names()
    source = (
        '"""Mentions aliyun.com/gpu-mem."""\n'
        "def f(index):\n"
        '    """Sets NVIDIA_VISIBLE_DEVICES."""\n'
        '    a = {"NVIDIA_VISIBLE_DEVICES": "0"}\n'
        '    return a, f"aliyun.com/gpu-count={index}", "the GPU ALIYUN_COM_GPU_MEM_IDX names"\n'
    )
    assert offences(source, names) == [
        (4, "NVIDIA_VISIBLE_DEVICES"),
        (5, "aliyun.com/gpu-count="),
    ]


@pytest.mark.parametrize(("module", "path"), _modules(), ids=[name for name, _ in _modules()])
def test_no_contract_name_outside_its_home(module: str, path: Path) -> None:
    found = offences(path.read_text(), contract_names())
    assert not found, (
        f"{module} ({path}) writes contract names out instead of importing them "
        f"from cgpu.core.layout: {found}"
    )
