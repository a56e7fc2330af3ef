"""This release: its version and the ledger layouts it writes and reads (`cgpu --version`).

The version changes whenever a ledger layout or an interface does (docs/operations.md,
"Upgrading"; tests/core/test_release.py pins both to it).
"""

from __future__ import annotations

from cgpu import __version__
from cgpu.core.ledger import layouts


def version_line() -> str:
    """One line: the release, the layout it writes and the layouts it reads."""
    known = layouts()
    return (
        f"cgpu {__version__} (ledger layout {known.writes}; "
        f"reads layouts {known.oldest_read} to {known.writes})"
    )
