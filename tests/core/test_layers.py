"""The package's layers: cgpu.core at the bottom, then the parts, then the CLI on top.

- `cgpu.core` (and `cgpu` itself) imports nothing else of cgpu;
- a part (`cgpu.deviceplugin`, `cgpu.hooks`, `cgpu.exporter`, and any other subpackage)
  imports only `cgpu.core` and itself, never a sibling;
- the CLI (`cgpu.cli`, `cgpu.commands`) may import anything below it.

The package as installed is checked (an editable install maps the checkout's deviceplugin/
and hooks/ into it), with every import statement counted, including lazy ones inside functions.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest
from package_files import package_modules

import cgpu
from cgpu import cli

PACKAGE_DIR = Path(cgpu.__file__).resolve().parent
TOP = {"cli", "commands", "__main__"}


def group(module: str) -> tuple[int, str]:
    """(layer, group) of a cgpu module: 0 core, 1 a part, 2 the CLI."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "core":
        return 0, "core"
    if parts[1] in TOP:
        return 2, "cli"
    return 1, parts[1]


def _submodule(name: str) -> str:
    """`cgpu.<name>` when that is a module of the package, else `cgpu` (a name in it)."""
    return f"cgpu.{name}" if importlib.util.find_spec(f"cgpu.{name}") else "cgpu"


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module) for each import of a cgpu module in `tree`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target == "cgpu":  # `from cgpu import x`: x may be a module
                found += [(node.lineno, _submodule(alias.name)) for alias in node.names]
            else:
                found.append((node.lineno, target))
    return [(line, name) for line, name in found if name.split(".")[0] == "cgpu"]


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """The imports in `source` (the text of `module`) that break the layering."""
    layer, own = group(module)
    problems = []
    for line, target in _imports(ast.parse(source), module, is_package):
        target_layer, target_group = group(target)
        if target_layer > layer:
            problems.append(f"{module}:{line} imports {target} from a higher layer")
        elif target_layer == layer == 1 and target_group != own:
            problems.append(f"{module}:{line} imports {target} from sibling {target_group}")
    return problems


def _modules() -> list[tuple[str, Path]]:
    return package_modules()


def test_the_checker_catches_upward_and_sideways_imports() -> None:
    assert violations("from cgpu.deviceplugin import units", "cgpu.core.config")
    assert violations("import cgpu.cli", "cgpu.exporter.scan")
    assert violations("from cgpu.hooks.oci import State", "cgpu.deviceplugin.rm.memory")
    assert violations("def f():\n    from cgpu.exporter import x\n", "cgpu.hooks.cdi")
    assert violations("from ..hooks import oci", "cgpu.deviceplugin.errors")
    assert violations("from cgpu import commands", "cgpu.core.paths")
    assert not violations("from cgpu.core.layout import X", "cgpu.hooks.cdi")
    assert not violations("from . import inventory", "cgpu.deviceplugin.errors")
    assert not violations("from cgpu.deviceplugin import cli", "cgpu.cli")
    assert not violations("from cgpu import __version__", "cgpu.exporter.cli")


def test_installed_package_respects_the_layers() -> None:
    modules = _modules()
    assert {"cgpu.core.config", "cgpu.deviceplugin.rm.memory", "cgpu.hooks.hook"} <= {
        name for name, _ in modules
    }
    problems = []
    for name, path in modules:
        problems += violations(path.read_text(), name, path.name == "__init__.py")
    assert problems == []


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_subcommand_modules_sit_below_the_cli(command: str) -> None:
    module_name, _ = cli.COMMANDS[command]
    assert group(module_name)[0] <= 2
    module = importlib.import_module(module_name)
    assert callable(module.register) and callable(module.run)
