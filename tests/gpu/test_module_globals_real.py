"""Module globals on a real GPU: what the shim charges at a load against what the driver takes.

The shim reads a cubin's globals from its sections, and from a fatbin those of the cubin the
driver loads for the device (native/common/cgpu_fatbin.c). Here the driver's own per-process
figure (NVML) is the judge: the charge is never less than what a load takes (over, never
under), and not more than what rounding explains.
"""

from __future__ import annotations

import pytest
from family import DATA, run_family

MiB = 1 << 20


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
    get = "library-global" if step.startswith("library") else "module-global"
    lines = run_family(tmp_path, "4GiB", "init", "usage", step, DATA / name, get, "big", "usage")
    assert [line[1] for line in lines if line[0] in (step, get)] == ["0", "0"], lines
    (_, _, shim0, host0), (_, _, shim1, host1) = [line for line in lines if line[0] == "usage"]
    charged, taken = int(shim1) - int(shim0), int(host1) - int(host0)
    print(f"{name}: charged {charged / MiB:.1f} MiB, the driver took {taken / MiB:.1f} MiB")
    assert charged >= taken, (charged, taken)  # over, never under
    assert charged <= taken + 2 * MiB, (charged, taken)
