"""One release version, pinned to the ledger layout and the interfaces (tests/releases.py)."""

from __future__ import annotations

import importlib.metadata
import itertools
import re
import subprocess
import sys
from pathlib import Path

from releases import CURRENT, PREVIOUS, RELEASES, Pins, api_fingerprint

import cgpu
from cgpu import cli
from cgpu.core import paths
from cgpu.core.ledger import layouts

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_the_installed_build_is_the_row_of_its_version() -> None:
    """A changed layout, C API or subcommand fails here until the version and the table move."""
    known = layouts()
    built = Pins(
        ledger_writes=known.writes,
        ledger_reads_from=known.oldest_read,
        ledger_size=known.size,
        api=api_fingerprint(paths.api_header_path().read_text()),
        commands=tuple(sorted(cli.COMMANDS)),
    )
    assert cgpu.__version__ == CURRENT
    assert built == RELEASES[CURRENT]


def test_the_fingerprint_sees_a_changed_interface() -> None:
    header = paths.api_header_path().read_text()
    grown = header.replace("unsigned int dead;", "unsigned int dead;\n    unsigned int spare;")
    assert grown != header
    assert api_fingerprint(grown) != api_fingerprint(header)
    renamed = header.replace("cgpu_strerror(", "cgpu_error_text(")
    assert renamed != header
    assert api_fingerprint(renamed) != api_fingerprint(header)


def test_releases_go_up_and_each_reads_the_one_before() -> None:
    versions = list(RELEASES)
    assert [_version(v) for v in versions] == sorted(_version(v) for v in versions)
    for before, after in itertools.pairwise(versions):
        pins = RELEASES[after]
        assert pins.ledger_reads_from <= RELEASES[before].ledger_writes <= pins.ledger_writes
    assert RELEASES[PREVIOUS].ledger_writes in layouts().reads


def test_one_version_everywhere() -> None:
    assert importlib.metadata.version("cgpu") == cgpu.__version__
    headings = re.findall(r"^## (\d\S*)", CHANGELOG.read_text(), re.M)
    assert headings[0] == CURRENT  # newest first
    assert sorted(headings, key=_version) == sorted(RELEASES, key=_version)


def test_cgpu_version_prints_the_release_and_its_layouts() -> None:
    known = layouts()
    out = subprocess.run(
        [sys.executable, "-P", "-m", "cgpu.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert out == (
        f"cgpu {CURRENT} (ledger layout {known.writes}; "
        f"reads layouts {known.oldest_read} to {known.writes})\n"
    )


def test_the_manifests_run_this_release() -> None:
    """Every cgpu image in deploy/ and the Helm chart carry the release version."""
    deploy = CHANGELOG.parent / "deploy"
    tags = []
    for path in sorted(deploy.rglob("*.yaml")):
        text = path.read_text()
        tags += [(path.name, t) for t in re.findall(r"registry\.example\.com/cgpu:(\S+)", text)]
        pinned = r"name: registry\.example\.com/cgpu\s+newTag: (\S+)"
        tags += [(path.name, t) for t in re.findall(pinned, text)]
    assert len(tags) >= 10
    assert {t for _, t in tags} == {CURRENT}, tags
    chart = (deploy / "helm" / "cgpu" / "Chart.yaml").read_text()
    assert re.findall(r"^(?:version|appVersion): \"?([\d.]+)\"?$", chart, re.M) == [CURRENT] * 2
