"""Memory figures inside a `cgpu run` child: slice (mem_get_info), torch's own, the container's
ledger (`cgpu ledger --json $CGPU_LEDGER_DIR`, via tests/clients/inside.py) and the driver's
per-process figure (NVML of the simulator, bypassing the shim, via tests/realstack/rt.py)."""
from __future__ import annotations

import json
import os
import traceback

import torch

MiB = 1 << 20
ROWS: list[dict] = []


def figs(tag: str, **extra) -> dict:
    import inside
    import rt
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    shim = "CGPU_LEDGER_DIR" in os.environ
    row = dict(
        tag=tag,
        total_MiB=total / MiB,
        free_MiB=round(free / MiB, 1),
        torch_reserved_MiB=round(torch.cuda.memory_reserved() / MiB, 1),
        torch_allocated_MiB=round(torch.cuda.memory_allocated() / MiB, 1),
        ledger_MiB=round(inside.ledger_used() / MiB, 1) if shim else None,
        driver_MiB=round(rt.driver_used(os.getpid()) / MiB, 1),
        **extra,
    )
    if shim:
        row["driver_minus_ledger_MiB"] = round(row["driver_MiB"] - row["ledger_MiB"], 1)
    ROWS.append(row)
    print("FIG " + json.dumps(row), flush=True)
    return row


def step(name: str, fn) -> None:
    """Run one scenario; record works / the exact error, and the figures after it."""
    try:
        info = fn() or {}
        figs(name, result="works", **info)
    except Exception as exc:  # report, go on with the next
        traceback.print_exc()
        figs(name, result=f"FAILS: {type(exc).__module__}.{type(exc).__qualname__}: {exc}"[:600])
