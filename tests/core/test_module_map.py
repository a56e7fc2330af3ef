"""docs/architecture.md's module maps name every module of the tree, Python and C."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
PY_ROOTS = ("cgpu", "deviceplugin", "hooks")


def _python_modules() -> list[Path]:
    found = []
    for root in PY_ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            generated = "_pb2" in path.name or path.parent.name == "api"
            if path.name != "__init__.py" and not generated:
                found.append(path)
    return found


def test_the_tree_has_modules_to_check() -> None:
    assert len(_python_modules()) > 50
    assert len(list((REPO / "native" / "shim").glob("*.c"))) > 10


@pytest.mark.parametrize("path", _python_modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_python_module_is_in_the_map(path: Path) -> None:
    doc = DOC.read_text()
    stem = path.stem
    assert f"`{stem}`" in doc or f".{stem}`" in doc or f"`{stem} " in doc, (
        f"{path.relative_to(REPO)} is missing from the module map in docs/architecture.md"
    )


@pytest.mark.parametrize(
    "path",
    sorted((REPO / "native" / "shim").glob("*.[ch]")),
    ids=lambda p: p.name,
)
def test_every_shim_file_is_in_the_map(path: Path) -> None:
    assert f"`{path.name}`" in DOC.read_text(), (
        f"native/shim/{path.name} is missing from the C file map in docs/architecture.md"
    )
