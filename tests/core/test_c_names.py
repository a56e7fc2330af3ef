"""The C side's contract names have one home, native/include/cgpu_names.h, and it agrees with
cgpu.core.layout, the Python side's.

- every macro of the header is `CGPU_<name>` for a `<name>` of layout.py, with the same value;
- no other C file of native/ writes one of layout.py's names out in a string literal (the name
  itself, or the name followed by `=`, `_`, `:`, `/` or a space: `"CGPU_MEM_LIMIT_"`, a message
  `"CGPU_COMPUTE_POLICY=%s is malformed"`); it uses the macro, so every name C uses is in the
  header;
- every macro of the header is used somewhere in native/.
As in tests/core/test_contract_names.py, only names with a `.`, `/` or `_` are looked for in the
C files: the config keywords (`device`, `share`) are plain words. Comments are not code.
"""

from __future__ import annotations

import re
from pathlib import Path

import c_graph  # tests/core/c_graph.py (pytest puts tests/core on sys.path)
import pytest
from test_contract_names import contract_names

from cgpu.core import layout

NATIVE = Path(__file__).resolve().parents[2] / "native"
HEADER = NATIVE / "include" / "cgpu_names.h"
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(.*)$", re.M)
_STRING = re.compile(r'"((?:\\.|[^"\\\n])*)"')


def header_names(text: str) -> dict[str, str]:
    """{macro: value} of the header's `#define CGPU_X "value"` lines (its guard left out); a
    ValueError for any other definition."""
    code = c_graph._without_comments(text)
    found: dict[str, str] = {}
    for macro, rest in _DEFINE.findall(code):
        if macro == "CGPU_NAMES_H":
            continue
        value = re.fullmatch(r'\s*"([^"\\]*)"\s*', rest)
        if not value or not macro.startswith("CGPU_"):
            raise ValueError(f'{macro}: not a name (`#define CGPU_<name> "value"`)')
        found[macro] = value.group(1)
    return found


def literal_offences(source: str, names: set[str]) -> list[str]:
    """The string literals of C `source` that write one of `names` out."""
    found = []
    for literal in _STRING.findall(c_graph._without_comments(source)):
        for name in names:
            at = re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?=$|[=_:/ ])", literal)
            if at:
                found.append(f'"{literal}" writes {name}')
    return found


def _c_files() -> dict[str, str]:
    return {
        path.relative_to(NATIVE).as_posix(): path.read_text()
        for path in sorted(NATIVE.rglob("*"))
        if path.suffix in {".c", ".h", ".inc", ".def"} and path != HEADER
    }


def test_the_checkers_catch_what_they_should() -> None:
    names = {"CGPU_MEM_LIMIT", "cgpu.conf"}
    source = (
        '/* "CGPU_MEM_LIMIT" in a comment */\n'
        'static const char P[] = "CGPU_MEM_LIMIT_";\n'
        'fail("CGPU_MEM_LIMIT=%s is malformed");\n'
        'snprintf(p, n, "%s/cgpu.conf", dir);\n'
        'getenv(CGPU_ENV_MEM_LIMIT); puts("CGPU_MEM_LIMITS"); puts("xcgpu.conf");\n'
    )
    assert literal_offences(source, names) == [
        '"CGPU_MEM_LIMIT_" writes CGPU_MEM_LIMIT',
        '"CGPU_MEM_LIMIT=%s is malformed" writes CGPU_MEM_LIMIT',
        '"%s/cgpu.conf" writes cgpu.conf',
    ]
    assert header_names('#define CGPU_A "a.b" /* c */\n#define CGPU_NAMES_H\n') == {"CGPU_A": "a.b"}
    for bad in ('#define CGPU_A ("a")\n', "#define CGPU_A 1\n", '#define OTHER "x"\n'):
        with pytest.raises(ValueError):
            header_names(bad)


def test_every_name_of_the_header_is_layouts() -> None:
    names = header_names(HEADER.read_text())
    assert {"CGPU_ENV_MEM_LIMIT", "CGPU_CONFIG_NAME", "CGPU_ENV_SIM_STATE"} <= set(names)
    wrong = {
        macro: (value, getattr(layout, macro.removeprefix("CGPU_"), None))
        for macro, value in names.items()
        if getattr(layout, macro.removeprefix("CGPU_"), None) != value
    }
    assert wrong == {}, "macro: (the header's value, layout.py's)"


def test_no_c_file_writes_a_contract_name_out() -> None:
    names = contract_names()
    assert "CGPU_MEM_LIMIT" in names and "cgpu.conf" in names
    found = {
        rel: offences
        for rel, source in _c_files().items()
        if (offences := literal_offences(source, names))
    }
    assert found == {}, "use the macro of native/include/cgpu_names.h"


def test_every_name_of_the_header_is_used() -> None:
    code = "\n".join(c_graph._without_comments(text) for text in _c_files().values())
    unused = [m for m in header_names(HEADER.read_text()) if not re.search(rf"\b{m}\b", code)]
    assert unused == []
