"""The device plugin is grouped by role, and the roles keep to their side.

- `cmd` (the command) may use every role; `config` only `cgpu.core`;
- `plugin` (the kubelet-facing server) uses `rm`, `kube`, `errors` and the API, never `cmd`;
- `rm` (the allocation policies, GPUs, health) uses `kube` and `errors`, never the kubelet
  API (building the kubelet's response is `plugin`'s job), `plugin` or `cmd`;
- `kube` (reads from the API server) uses no other role;
- no module imports a cgpu module from inside a function, the modules import no cycle, and
  none reaches into another object's private state (`other._name`).

The installed package is checked.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import cgpu.deviceplugin

PACKAGE = Path(cgpu.deviceplugin.__file__).resolve().parent
ROOT = "cgpu.deviceplugin"
ALLOWED = {
    "cmd": {"cmd", "config", "plugin", "rm", "kube", "errors", "api"},
    "config": {"config"},
    "plugin": {"plugin", "rm", "kube", "errors", "api"},
    "rm": {"rm", "kube", "errors"},
    "kube": {"kube"},
    "errors": {"errors"},
    "api": {"api"},
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_pb2" in path.name:
            continue
        rel = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join((ROOT, *rel)).removesuffix(".__init__")
        found[name] = path
    return found


def _role(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else ""


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[ast.AST, str]]:
    """(node, absolute cgpu module) for every import in the tree; `from x import m` names
    x.m when that is a module."""
    modules = _modules()
    out: list[tuple[ast.AST, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                parts = parts[: len(parts) - node.level + (1 if is_package else 0)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((node, sub if sub in modules else base))
    return [(n, m) for n, m in out if m.split(".")[0] == "cgpu"]


def _function_level(tree: ast.AST) -> set[int]:
    """ids of import nodes inside a function."""
    inner = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    inner.add(id(sub))
    return inner


def test_the_roles_exist() -> None:
    roles = {_role(m) for m in _modules()}
    assert {"cmd", "config", "plugin", "rm", "kube", "errors", "api"} <= roles
    for role in ("cmd", "config", "plugin", "rm", "kube"):
        assert (PACKAGE / role / "__init__.py").is_file()


@pytest.mark.parametrize("module", sorted(_modules()), ids=str)
def test_a_module_keeps_to_its_role(module: str) -> None:
    path = _modules()[module]
    tree = ast.parse(path.read_text())
    role = _role(module)
    inner = _function_level(tree)
    problems = []
    for node, target in _imports(tree, module, path.name == "__init__.py"):
        if id(node) in inner:
            problems.append(f"line {node.lineno}: imports {target} inside a function")
        inside = target.startswith(ROOT + ".") and role in ALLOWED
        if inside and _role(target) not in ALLOWED[role]:
            problems.append(f"line {node.lineno}: {role} imports {target}")
    assert problems == []


def test_the_modules_import_no_cycle() -> None:
    modules = _modules()
    graph = {
        name: {
            t
            for _, t in _imports(ast.parse(path.read_text()), name, path.name == "__init__.py")
            if t in modules and t != name
        }
        for name, path in modules.items()
    }
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for nxt in sorted(graph[name]):
            if state.get(nxt) == 1:
                raise AssertionError(" -> ".join([*trail, name, nxt]))
            if nxt not in state:
                visit(nxt, [*trail, name])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [])


@pytest.mark.parametrize("module", sorted(_modules()), ids=str)
def test_no_module_reaches_into_private_state(module: str) -> None:
    tree = ast.parse(_modules()[module].read_text())
    reaching = [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]
    assert reaching == []
