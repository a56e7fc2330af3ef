"""`pip install .` puts one import package, `cgpu`, into site-packages; `pip install -e .` runs
the checkout's own files."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_wheel_holds_one_top_level_package(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("cgpu-*.whl")
    names = [n for n in zipfile.ZipFile(wheel).namelist() if ".data/scripts/" not in n]
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert top == {"cgpu"}
    assert "cgpu/deviceplugin/__init__.py" in names
    assert "cgpu/hooks/inject.py" in names
    assert "cgpu/exporter/cli.py" in names
    assert "cgpu/core/context_probe.py" in names  # run as a program by context_cost
    assert "cgpu/_native/libcgpu.so" in names


def test_the_development_install_runs_the_checkout() -> None:
    """scripts/setup.sh installs editable: an edit to a checkout file takes effect at once."""
    probe = "import cgpu.deviceplugin, cgpu.exporter; print(cgpu.deviceplugin.__file__)"
    out = subprocess.run([sys.executable, "-P", "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).resolve() == REPO / "deviceplugin" / "__init__.py"


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
