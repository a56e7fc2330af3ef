"""The C files' graph for tests/core/test_layers.py: which file includes or calls which.

A unit is a file stem: `ledger.c` and `ledger.h` are one unit, `ledger`. An edge A -> B means a
file of A includes B's header (`#include "b.h"`) or calls a function that B defines (a call in a
function body or in a macro's body). Tables that are included to be expanded (`hooks.def`,
`*.inc`) are not units. The parser is small and knows C only as far as this code base writes it:
comments, strings and character literals are dropped first, and a definition is a name followed
by its parameter list and a `{` at file scope.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

_NOT_CALLS = {
    "if", "for", "while", "switch", "return", "sizeof", "defined", "__attribute__",
    "_Alignof", "alignof", "__typeof__", "typeof", "_Static_assert", "__builtin_expect",
}  # fmt: skip
_IDENT = re.compile(r"[A-Za-z_]\w*")
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
_DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", re.M)
_UNDEF = re.compile(r"^[ \t]*#[ \t]*undef[ \t]+(\w+)", re.M)


@dataclass
class CFile:
    """What one C file defines, calls and includes."""

    name: str
    includes: list[str] = field(default_factory=list)
    defines: set[str] = field(default_factory=set)  # functions other files can call
    statics: set[str] = field(default_factory=set)
    calls: set[str] = field(default_factory=set)
    macros: set[str] = field(default_factory=set)  # #define'd names
    undefs: set[str] = field(default_factory=set)


def _without_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _without_literals(text: str) -> str:
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", text)


def _closing_paren(text: str, at: int) -> int:
    depth = 0
    for i in range(at, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def parse(name: str, source: str) -> CFile:
    """The definitions, calls, includes and macros of one file's text."""
    text = _without_comments(source)
    out = CFile(name, includes=_INCLUDE.findall(text))
    out.macros = set(_DEFINE.findall(text))
    out.undefs = set(_UNDEF.findall(text))
    text = _without_literals(text)
    for directive in _DIRECTIVE.findall(text):
        macro = _DEFINE.match(directive)
        body = directive[macro.end() :] if macro else ""
        out.calls |= {m.group(1) for m in re.finditer(r"([A-Za-z_]\w*)\s*\(", body)}
    code = _DIRECTIVE.sub("", text)
    depth, i, statement = 0, 0, 0
    while i < len(code):
        ch = code[i]
        if ch in "{};":
            depth += {"{": 1, "}": -1, ";": 0}[ch]
            i += 1
            if depth == 0 and ch in "};":
                statement = i
            continue
        word = _IDENT.match(code, i)
        if not word:
            i += 1
            continue
        rest = word.end()
        while rest < len(code) and code[rest] in " \t\n":
            rest += 1
        ident = word.group()
        if rest < len(code) and code[rest] == "(" and ident not in _NOT_CALLS:
            if depth > 0:
                out.calls.add(ident)
            else:
                after = _closing_paren(code, rest) + 1
                while after < len(code) and code[after] in " \t\n":
                    after += 1
                if after < len(code) and code[after] == "{":
                    is_static = re.search(r"\bstatic\b", code[statement:i])
                    (out.statics if is_static else out.defines).add(ident)
        i = word.end()
    out.calls -= out.macros
    return out


def unit(file_name: str) -> str:
    """The unit of a file: its stem."""
    return file_name.rsplit(".", 1)[0]


def edges(files: Iterable[CFile]) -> dict[str, dict[str, str]]:
    """unit -> {unit it depends on: why (the first include or call seen)}."""
    files = list(files)
    units = {unit(f.name) for f in files if f.name.endswith((".c", ".h"))}
    owner = {fn: unit(f.name) for f in files for fn in f.defines}
    out: dict[str, dict[str, str]] = {u: {} for u in units}
    for f in files:
        if not f.name.endswith((".c", ".h")):
            continue
        mine = unit(f.name)
        for header in f.includes:
            target = unit(header)
            if header.endswith(".h") and target in units and target != mine:
                out[mine].setdefault(target, f"{f.name} includes {header}")
        for fn in sorted(f.calls - f.defines - f.statics):
            target = owner.get(fn)
            if target and target != mine:
                out[mine].setdefault(target, f"{f.name} calls {fn}()")
    return out


def circles(graph: Mapping[str, Mapping[str, str]]) -> list[list[str]]:
    """Each set of nodes that reach each other (Tarjan's strongly connected components); any
    graph of names, the Python modules' too."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def parse_dir(directory: Path) -> list[CFile]:
    """Every .c, .h, .def and .inc file of a directory."""
    return [
        parse(p.name, p.read_text())
        for p in sorted(directory.iterdir())
        if p.suffix in {".c", ".h", ".def", ".inc"}
    ]
