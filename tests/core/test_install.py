"""`pip install .` puts one import package, `cgpu`, into site-packages."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path


def test_the_distribution_installs_one_top_level_package() -> None:
    files = metadata.distribution("cgpu").files or []
    installed = [f for f in files if not f.parts[0].startswith("..")]  # scripts live in bin/
    top = {f.parts[0] for f in installed if not f.parts[0].endswith(".dist-info")}
    assert top == {"cgpu"}
    names = {"/".join(f.parts) for f in installed}
    assert "cgpu/deviceplugin/__init__.py" in names
    assert "cgpu/hooks/inject.py" in names
    assert "cgpu/exporter/cli.py" in names
    assert any(n.startswith("cgpu/_native/") for n in names)


def test_no_generic_top_level_names_are_importable(tmp_path: Path) -> None:
    probe = (
        "import importlib.util as u; "
        "print([n for n in ('hooks', 'deviceplugin', 'cgpu.hooks') if u.find_spec(n)])"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", probe], cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['cgpu.hooks']"
