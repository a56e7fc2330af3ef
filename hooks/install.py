"""`cgpu hook install`: the hooks.d file (oci-hooks 1.0.0) that podman and CRI-O read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cgpu.hooks.emit import oci_hook, write_json

DEFAULT_HOOKS_DIR = "/usr/share/containers/oci/hooks.d"
HOOK_FILE = "cgpu.json"
STAGES = ("createRuntime", "prestart")
HOOK_TIMEOUT_S = 30


def hook_args(state_dir: str, simulate: bool) -> list[str]:
    """The options every `cgpu hook` call that cgpu writes carries."""
    return ["--state-dir", state_dir, *(["--simulate"] if simulate else [])]


def hooks_d_entry(
    argv: list[str], state_dir: str, stage: str, simulate: bool = False
) -> dict[str, Any]:
    """One hooks.d entry running `cgpu hook` at `stage` and at poststop.

    The 1.0.0 format can match annotations, commands and bind mounts but not environment
    variables, so the hook runs for every container; it returns at once for one that sets no
    limit variable, and tells the stages apart by the state's status ("stopped" at poststop).
    """
    return {
        "version": "1.0.0",
        "hook": oci_hook(argv, "hook", *hook_args(state_dir, simulate), timeout=HOOK_TIMEOUT_S),
        "when": {"always": True},
        "stages": [stage, "poststop"],
    }


def install(
    directory: str, argv: list[str], state_dir: str, stage: str, simulate: bool = False
) -> Path:
    """Write `<directory>/cgpu.json`; returns its path."""
    entry = hooks_d_entry(argv, state_dir, stage, simulate)
    return write_json(Path(directory) / HOOK_FILE, entry)
