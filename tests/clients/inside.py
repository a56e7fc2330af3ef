"""What the client scripts import inside `cgpu run`: the ledger's figure, a fill loop, a report.

The scripts run in a child Python under `cgpu run --gpu-mem 4GiB`; this module is on their
PYTHONPATH. It never touches CUDA itself: each script hands in its client's own calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any, TypeVar

SLICE = 4 << 30
CHUNK = 64 << 20
MAX_CHUNKS = 2 * SLICE // CHUNK  # a loop that never fails stops here (and the test fails)
T = TypeVar("T")


def ledger_used() -> int:
    """The container's use on its one GPU, as `cgpu ledger` reads the shared ledger."""
    cgpu = os.path.join(os.path.dirname(sys.executable), "cgpu")
    cmd = [cgpu] if os.path.exists(cgpu) else [sys.executable, "-m", "cgpu.cli"]
    out = subprocess.run(
        [*cmd, "ledger", "--json", os.environ["CGPU_LEDGER_DIR"]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    [ledger] = json.loads(out)
    [device] = ledger["devices"]
    return int(device["used"])


def fill(allocate: Callable[[], T]) -> tuple[list[T], BaseException | None]:
    """Allocate CHUNK after CHUNK until the client raises; the handles and what it raised."""
    held: list[T] = []
    while len(held) < MAX_CHUNKS:
        try:
            held.append(allocate())
        except Exception as exc:  # the client's own error type is what the test checks
            return held, exc
    return held, None


def describe(exc: BaseException | None) -> dict[str, str]:
    """The error as the test checks it: its type's module and name, and its message."""
    if exc is None:
        return {"type": "", "message": "no error: the slice did not stop the client"}
    kind = type(exc)
    return {"type": f"{kind.__module__}.{kind.__qualname__}", "message": str(exc)}


def exercise(
    allocate: Callable[[], T],
    release: Callable[[list[T]], None],
    mem_info: Callable[[], tuple[int, int]],
) -> dict[str, Any]:
    """Fill the slice through the client, free it all, and note each step's figures."""
    free0, total = mem_info()
    used0 = ledger_used()
    held, error = fill(allocate)
    result = {
        "total": total,
        "free_before": free0,
        "ledger_before": used0,
        "allocated": len(held) * CHUNK,
        "error": describe(error),
        "free_full": mem_info()[0],
        "ledger_full": ledger_used(),
    }
    release(held)
    del held
    result.update(free_after=mem_info()[0], ledger_after=ledger_used())
    return result


def report(**values: Any) -> None:
    """Print the results for the test (the last RESULT line wins)."""
    print("RESULT " + json.dumps(values), flush=True)
