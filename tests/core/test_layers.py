"""The package's layers: cgpu.core at the bottom, then the parts, then the CLI on top; and the
C files' layers (native/shim, from the entry points down; native/common below the shim and the
simulator) with no circle in native/ at all.

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

import c_graph  # tests/core/c_graph.py (pytest puts tests/core on sys.path)
import pytest
from package_files import package_modules

from cgpu import cli

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


# Circles of imports that another piece of work owns and is taking apart; no new one may appear.
def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, dict[str, str]]:
    """module -> {cgpu module it imports: where}, from {module: (source, is_package)}.

    `from cgpu.x import y` counts as an import of cgpu.x.y when that is a module."""
    graph: dict[str, dict[str, str]] = {}
    for module, (source, is_package) in sources.items():
        found = graph.setdefault(module, {})
        tree = ast.parse(source)
        for line, target in _imports(tree, module, is_package):
            names = [target]
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.lineno == line:
                    names = [
                        f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in sources
                    ]
                    names = names or [target]
            for name in names:
                while name and name not in sources:
                    name = name.rpartition(".")[0]
                if name and name != module:
                    found.setdefault(name, f"{module}:{line}")
    return graph


def test_the_python_circle_check_sees_lazy_and_relative_imports() -> None:
    sources = {
        "cgpu.part": ("", True),
        "cgpu.part.a": ("from . import b\n", False),
        "cgpu.part.b": ("def f():\n    from cgpu.part.a import x\n", False),
        "cgpu.part.c": ("import cgpu.part.a\n", False),
    }
    graph = import_graph(sources)
    assert graph["cgpu.part.a"] == {"cgpu.part.b": "cgpu.part.a:1"}
    assert c_graph.circles(graph) == [["cgpu.part.a", "cgpu.part.b"]]


def test_installed_package_has_no_import_circle() -> None:
    sources = {name: (path.read_text(), path.name == "__init__.py") for name, path in _modules()}
    found = c_graph.circles(import_graph(sources))
    assert found == []


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_subcommand_modules_sit_below_the_cli(command: str) -> None:
    module_name, _ = cli.COMMANDS[command]
    assert group(module_name)[0] <= 2
    module = importlib.import_module(module_name)
    assert callable(module.register) and callable(module.run)


# ---- the C files ------------------------------------------------------------------------

NATIVE = Path(__file__).resolve().parents[2] / "native"

# libcgpu.so's files from the top (the entry points) down; a file includes and calls only files
# of a lower layer (native/shim/README.md and docs/architecture.md keep the same table).
SHIM_LAYERS: list[set[str]] = [
    {
        "hooks_mem",
        "hooks_vmm",
        "hooks_ctx",
        "hooks_graph",
        "hooks_module",
        "hooks_info",
        "hooks_launch",
        "entry",
    },
    {"charge", "compute"},
    {"token"},
    {"shim"},  # the shim's set-up
    {"request", "ledger_read", "ledger_test"},
    {"ledger"},
    {"config", "ptrtable", "resolve", "errors"},
    {"api"},
]
# Defined once, in native/include/cgpu_macros.h, for every C file of cgpu.
SHARED_MACROS = {"EXPORT", "NO_SANITIZE", "likely", "unlikely", "MiB", "GiB"}


def c_violations(graph: dict[str, dict[str, str]], layers: list[set[str]]) -> list[str]:
    """The edges of `graph` that do not run downwards through `layers`, and unplaced units."""
    layer = {name: i for i, names in enumerate(layers) for name in names}
    problems = [f"{u} is in no layer of SHIM_LAYERS" for u in sorted(graph) if u not in layer]
    for source, targets in sorted(graph.items()):
        for target, why in sorted(targets.items()):
            if source in layer and target in layer and layer[target] <= layer[source]:
                problems.append(f"{why}: {target} is not below {source}")
    return problems


def test_the_c_checker_catches_circles_and_upward_calls() -> None:
    files = [
        c_graph.parse("low.c", '#include "low.h"\nint low_fn(void) { return high_fn(); }\n'),
        c_graph.parse("high.c", '#include "low.h"\nint high_fn(void) { return low_fn(); }\n'),
        c_graph.parse("low.h", "int low_fn(void);\n"),
    ]
    graph = c_graph.edges(files)
    assert graph == {
        "low": {"high": "low.c calls high_fn()"},
        "high": {"low": "high.c includes low.h"},
    }
    assert c_graph.circles(graph) == [["high", "low"]]
    assert c_violations(graph, [{"high"}, {"low"}]) == [
        "low.c calls high_fn(): high is not below low"
    ]
    assert c_violations(graph, [{"high"}]) == ["low is in no layer of SHIM_LAYERS"]
    # Calls in macro bodies count; statics, comments, strings and declarations do not.
    macro = c_graph.parse(
        "m.c", "#define GO(x) high_fn(x)\n/* low_fn() */\nstatic int f(void) { return 0; }\n"
    )
    assert macro.calls == {"high_fn"} and macro.statics == {"f"} and not macro.defines
    decl = c_graph.parse(
        "d.c", 'int g(void);\nEXPORT int h(int a) { return g() + puts("low_fn()"); }\n'
    )
    assert decl.defines == {"h"} and decl.calls == {"g", "puts"}


def test_the_shim_files_run_one_way() -> None:
    files = c_graph.parse_dir(NATIVE / "shim")
    graph = c_graph.edges(files)
    assert {"ledger", "ledger_read", "shim", "charge", "hooks_mem"} <= set(graph)
    assert "ledger" in graph["ledger_read"]  # the parser sees calls at all
    assert c_graph.circles(graph) == []
    assert c_violations(graph, SHIM_LAYERS) == []


def test_the_simulator_files_have_no_circle() -> None:
    graph = c_graph.edges(c_graph.parse_dir(NATIVE / "sim"))
    assert "cuda_core" in graph["cuda_memory"]
    assert c_graph.circles(graph) == []


def test_the_common_files_sit_below_the_shim_and_the_simulator() -> None:
    """native/common holds what the shim and the simulator must compute alike: it includes and
    calls nothing of either (a bottom layer for both), has no circle, and both use it."""
    common = c_graph.parse_dir(NATIVE / "common")
    shim = c_graph.parse_dir(NATIVE / "shim")
    sim = c_graph.parse_dir(NATIVE / "sim")
    graph = c_graph.edges([*common, *shim, *sim])

    def units(files: list[c_graph.CFile]) -> set[str]:
        return {c_graph.unit(f.name) for f in files if f.name.endswith((".c", ".h"))}

    below = units(common)
    assert {"cgpu_image", "cgpu_ptx", "cgpu_fatbin", "cgpu_sizes", "cgpu_procstat"} <= below
    assert not below & (units(shim) | units(sim))
    # The shim's dlsym stands in for libc's (entry.c): calling it is calling libc.
    upward = sorted(
        why
        for u in below
        for t, why in graph[u].items()
        if t not in below and not why.endswith(" calls dlsym()")
    )
    assert upward == []
    assert c_graph.circles({u: graph[u] for u in below}) == []
    for side in (shim, sim):
        assert any(t in below for u in units(side) for t in graph[u]), "no side of its own"


def test_shared_headers_only_declare() -> None:
    """The headers of native/include and native/common define no function: the code they
    declare is compiled once, in native/common (no reader in a header, with static state in
    every file that includes it)."""
    bodies = {
        path.relative_to(NATIVE).as_posix(): sorted(parsed.defines | parsed.statics)
        for folder in ("include", "common")
        for path in sorted((NATIVE / folder).glob("*.h"))
        if (parsed := c_graph.parse(path.name, path.read_text())).defines | parsed.statics
    }
    assert bodies == {}


def test_helper_macros_are_defined_once() -> None:
    """The shared helpers only in cgpu_macros.h; any other macro that two files define is an
    X-macro (each file that defines it #undefs it after its table)."""
    files = {
        path.relative_to(NATIVE).as_posix(): c_graph.parse(path.name, path.read_text())
        for path in sorted(NATIVE.rglob("*"))
        if path.suffix in {".c", ".h", ".def", ".inc"}
    }
    where: dict[str, list[str]] = {}
    for rel, parsed in files.items():
        for name in parsed.macros:
            where.setdefault(name, []).append(rel)
    for name in sorted(SHARED_MACROS):
        assert where.get(name) == ["include/cgpu_macros.h"], name
    repeated = {
        name: rels
        for name, rels in where.items()
        if len(rels) > 1 and not all(name in files[rel].undefs for rel in rels)
    }
    assert repeated == {}
