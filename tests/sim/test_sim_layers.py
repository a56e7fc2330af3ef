"""The simulator's C files call each other without a circle.

A file "uses" another when it calls a non-static function that the other defines. The
uses must form a directed acyclic graph, so that each file can be read (and changed)
knowing only the files below it. The shared pieces of the driver (the current context,
the stream queues, waiting) live in one low file that the others use.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

SIM_DIR = Path(__file__).resolve().parents[2] / "native" / "sim"

_NOISE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"', re.S)
_DEFINITION = re.compile(r"^(?!static\b)[A-Za-z_][\w \*]*?\b(\w+)\s*\([^;{}]*\)\s*\{", re.M)
_CALL = re.compile(r"\b(\w+)\s*\(")


def _sources() -> dict[str, str]:
    """Each C file's text without comments and string literals."""
    return {p.name: _NOISE.sub(" ", p.read_text()) for p in sorted(SIM_DIR.glob("*.c"))}


def uses(sources: dict[str, str]) -> dict[str, dict[str, set[str]]]:
    """file -> {other file -> names it calls there}."""
    defined: dict[str, set[str]] = {}
    for name, text in sources.items():
        for m in _DEFINITION.finditer(text):
            defined.setdefault(m.group(1), set()).add(name)
    graph: dict[str, dict[str, set[str]]] = {name: {} for name in sources}
    for name, text in sources.items():
        for m in _CALL.finditer(text):
            for other in defined.get(m.group(1), ()):
                if other != name:
                    graph[name].setdefault(other, set()).add(m.group(1))
    return graph


def find_circle(graph: dict[str, dict[str, set[str]]]) -> list[str]:
    """One circle of files, or [] when there is none."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_the_parser_finds_definitions_and_calls() -> None:
    """The check sees a circle where there is one (it cannot pass by seeing nothing)."""
    graph = uses({
        "a.c": "int f(void) { return g(); }\nstatic int h(void) { return 0; }",
        "b.c": "int g(void)\n{\n    return f() + h();\n}",
    })
    assert graph["a.c"] == {"b.c": {"g"}}
    assert graph["b.c"] == {"a.c": {"f"}}
    assert find_circle(graph) == ["a.c", "b.c", "a.c"]


def test_simulator_files_form_no_circle() -> None:
    graph = uses(_sources())
    assert len(graph) > 20, "the simulator's sources were not found"
    circle = find_circle(graph)
    detail = [
        f"{a} -> {b}: {sorted(graph[a][b])}" for a, b in itertools.pairwise(circle)
    ]
    assert not circle, "the simulator's files call each other in a circle:\n" + "\n".join(detail)


def test_shared_driver_pieces_sit_below_context_stream_and_launch() -> None:
    graph = uses(_sources())
    for name in ("cuda_context.c", "cuda_stream.c", "cuda_launch.c", "cuda_memory.c"):
        assert "cuda_current.c" in graph[name], f"{name} should use cuda_current.c"
    assert not {"cuda_context.c", "cuda_stream.c", "cuda_launch.c", "cuda_memory.c",
                "cuda_device.c", "cuda_transfer.c", "cuda_copy.c"} & set(graph["cuda_current.c"])
