"""The table of releases: what each one writes and offers, pinned to its version.

The rule (docs/operations.md, "Upgrading"): the release version changes whenever the ledger
layout or an interface changes. tests/core/test_release.py checks the installed build against
the row of its version, so a change to the layout, to cgpu_api.h or to the `cgpu` subcommands
fails there until it gets a new version, a new row here and a CHANGELOG.md entry.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import cffi


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
    # What shipped until commit e69dd6b (tests/core/test_upgrade.py builds its shim).
    "0.1.0": Pins(3, 3, 40064, "9b0337e838a9", _COMMANDS_0_1),
    # Readers take layout 2 as well, and longer headers; cgpu_ledger_layouts; cgpu --version.
    "0.2.0": Pins(3, 2, 40064, "af27fe5ef3ff", _COMMANDS_0_1),
}
PREVIOUS, CURRENT = list(RELEASES)[-2:]
PREVIOUS_COMMIT = "e69dd6b"  # the last commit of PREVIOUS


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
