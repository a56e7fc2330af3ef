"""The stack a launch grows, on a real GPU: what the shim charges against what the driver takes.

cuda.h says the driver "automatically increases the per-thread stack size for each kernel
launch as needed" and keeps it. The shim reads the grown size from the context's limit at
cuMemGetInfo and charges the stack for every resident thread (charge.c, stack_reconcile).
Here the driver's own per-process figure (NVML) is the judge of both: that the limit shows the
growth, and what the growth takes.
"""

from __future__ import annotations

import pytest
from family import DATA, run_family

MiB = 1 << 20


@pytest.mark.gpu
def test_the_stack_a_launch_grows_is_charged_what_the_driver_takes(tmp_path):
    lines = run_family(
        tmp_path, "16GiB",
        "init", "module-load", DATA / "local_sm90.cubin", "usage",
        "launch", "big_stack", "getlimit", "stack", "usage",
    )  # fmt: skip
    launch = next(line for line in lines if line[0] == "launch")
    limit = next(line for line in lines if line[0] == "getlimit")
    (_, _, shim0, host0), (_, _, shim1, host1) = [line for line in lines if line[0] == "usage"]
    charged, taken = int(shim1) - int(shim0), int(host1) - int(host0)
    print(f"stack {limit[2]} bytes a thread: charged {charged / MiB:.1f} MiB, the driver took "
          f"{taken / MiB:.1f} MiB")  # fmt: skip
    assert launch[1] == "0", lines
    assert int(limit[2]) >= 8000  # the limit shows the growth (what the shim reads)
    assert charged >= taken - 2 * MiB, (charged, taken)
    assert charged <= taken + 2 * MiB, (charged, taken)
