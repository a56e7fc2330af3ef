"""Module globals on a real GPU: what the shim charges at a load against what the driver takes.

The shim reads a cubin's globals from its sections, and from a fatbin those of the cubin the
driver loads for the device (native/include/cgpu_fatbin.h). Here the driver's own per-process
figure (NVML) is the judge: the charge is never less than what a load takes (over, never
under), and not more than what rounding explains.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cgpu.core.paths import shim_path

MiB = 1 << 20
DATA = Path(__file__).parent.parent / "shim" / "data"
CLIENT = Path(__file__).parent.parent / "shim" / "family_client.py"


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("step", "name"),
    [
        ("module-load", "globals_sm90.cubin"),
        ("module-load", "globals_sm90.fatbin"),
        ("library-load-wrapped", "globals_sm90_lz4.fatbin"),
        ("library-load-wrapped", "globals_sm90_zstd.fatbin"),
        ("module-load", "globals_by_arch.fatbin"),
    ],
)
def test_a_load_is_charged_what_the_driver_takes(tmp_path, step, name):
    env = dict(
        os.environ,
        LD_PRELOAD=str(shim_path()),
        CGPU_MEM_LIMIT="4GiB",
        CGPU_LEDGER_DIR=str(tmp_path),
    )
    get = "library-global" if step.startswith("library") else "module-global"
    steps = ["init", "usage", step, str(DATA / name), get, "big", "usage"]
    proc = subprocess.run(
        [sys.executable, "-P", str(CLIENT), *steps],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line.split() for line in proc.stdout.splitlines()]
    assert [line[1] for line in lines if line[0] in (step, get)] == ["0", "0"], proc.stdout
    (_, _, shim0, host0), (_, _, shim1, host1) = [line for line in lines if line[0] == "usage"]
    charged, taken = int(shim1) - int(shim0), int(host1) - int(host0)
    print(f"{name}: charged {charged / MiB:.1f} MiB, the driver took {taken / MiB:.1f} MiB")
    assert charged >= taken, (charged, taken)  # over, never under
    assert charged <= taken + 2 * MiB, (charged, taken)
