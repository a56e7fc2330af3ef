"""The table of releases: what each one writes and offers, pinned to its version; and the
previous release itself, built from its commit for the upgrade tests.

The rule (docs/operations.md, "Upgrading"): the release version changes whenever the ledger
layout or an interface changes. tests/core/test_release.py checks the installed build against
the row of its version, so a change to the layout, to cgpu_api.h or to the `cgpu` subcommands
fails there until it gets a new version, a new row here and a CHANGELOG.md entry.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import cffi
import pytest

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Pins:
    """What one release writes and offers."""

    ledger_writes: int  # the layout of the ledgers it creates and charges
    ledger_reads_from: int  # the oldest layout its readers take (up to ledger_writes)
    ledger_size: int  # bytes of the layout it writes
    api: str  # api_fingerprint(cgpu_api.h)
    commands: tuple[str, ...]  # the `cgpu` subcommands


_COMMANDS_0_1 = (
    "cdi", "compute-arbiter", "device-plugin", "dra-driver", "exporter", "hook", "ledger",
    "mps-daemon", "run", "scheduler-extender", "shim-path", "smi",
)  # fmt: skip

RELEASES: dict[str, Pins] = {
    # What shipped until commit e69dd6b.
    "0.1.0": Pins(3, 3, 40064, "9b0337e838a9", _COMMANDS_0_1),
    # Readers take layout 2 as well, and longer headers; cgpu_ledger_layouts; cgpu --version.
    # Shipped until commit f12b16b.
    "0.2.0": Pins(3, 2, 40064, "af27fe5ef3ff", _COMMANDS_0_1),
    # `cgpu webhook`; compute priority in the one config parser (cgpu_api.h).
    "0.3.0": Pins(3, 2, 40064, "5b31a6f67f95", tuple(sorted((*_COMMANDS_0_1, "webhook")))),
}
PREVIOUS, CURRENT = list(RELEASES)[-2:]
PREVIOUS_COMMIT = "f12b16b"  # the last commit of PREVIOUS


def api_fingerprint(header: str) -> str:
    """12 hex digits over the C API: its structs (name, size), constants (name, value) and
    functions (names)."""
    ffi = cffi.FFI()
    ffi.cdef(header)
    structs = sorted(set(re.findall(r"^struct (\w+) \{", header, re.M)))
    consts = sorted(set(re.findall(r"^\s*(CGPU_\w+\s*=\s*-?\w+)", header, re.M)))
    functions = sorted(set(re.findall(r"^[A-Za-z_][\w \*]*?\b(\w+)\([^;]*\);", header, re.M)))
    text = ";".join(
        [
            *(f"{s}={ffi.sizeof(f'struct {s}')}" for s in structs),
            *(re.sub(r"\s", "", c) for c in consts),
            *functions,
        ]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# ---- the previous release, built from its commit (cached under build/upgrade-<commit>/) -----


def _run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(command, capture_output=True, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout[-4000:]}{done.stderr[-4000:]}"
    return done


def previous_source() -> Path:
    """The previous release's sources (`git archive` of PREVIOUS_COMMIT); fails without it."""
    has_git = shutil.which("git") is not None
    probe = ["git", "-C", str(REPO), "cat-file", "-e", f"{PREVIOUS_COMMIT}^{{commit}}"]
    if not has_git or subprocess.run(probe, capture_output=True).returncode != 0:
        pytest.fail(
            f"the upgrade tests build release {PREVIOUS} from commit {PREVIOUS_COMMIT}, which "
            f"{REPO} does not have: run them in a clone with the full history "
            "(git fetch --unshallow)"
        )
    source = REPO / "build" / f"upgrade-{PREVIOUS_COMMIT}" / "src"
    if not (source / "pyproject.toml").is_file():
        staging = source.with_name("src.staging")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        paths = [
            "native",
            "CMakeLists.txt",
            "pyproject.toml",
            "README.md",
            "cgpu",
            "deviceplugin",
            "hooks",
        ]
        archive = _run(["git", "-C", str(REPO), "archive", PREVIOUS_COMMIT, *paths])
        _run(["tar", "-x", "-C", str(staging)], input=archive.stdout)
        shutil.rmtree(source, ignore_errors=True)
        staging.rename(source)
    return source


def previous_shim() -> Path:
    """The previous release's libcgpu.so (cmake, the shim's target only)."""
    source = previous_source()
    build = source.with_name("shim-build")
    _run(["cmake", "-S", str(source), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release"])
    _run(["cmake", "--build", str(build), "--target", "cgpu", "-j2"], timeout=900)
    shim = build / "native-out" / "libcgpu.so"
    assert shim.is_file(), f"no {shim} after the build"
    return shim


def previous_package() -> Path:
    """A directory holding the previous release's installed `cgpu` package (pip --target)."""
    source = previous_source()
    site = source.with_name("site")
    if not (site / "cgpu" / "_native" / "libcgpu.so").is_file():
        shutil.rmtree(site, ignore_errors=True)
        install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site)]
        _run([*install, str(source)], timeout=1200)
    return site


def previous_cgpu(site: Path) -> list[str]:
    """The command line of the previous release's `cgpu` (this Python, its package first)."""
    boot = (
        f"import sys; sys.path.insert(0, {str(site)!r}); "
        "from cgpu.cli import main; sys.exit(main())"
    )
    return [sys.executable, "-I", "-c", boot]
