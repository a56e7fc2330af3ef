"""The modules NVIDIA's runtime loads for the kernels nvcc's code registers: their globals are
charged when the runtime loads them, whichever way it goes to the driver. libcudart 11.8 loads
through the driver's private table for the runtime (cuGetExportTable), 12.9 and 13 through
cuLibraryLoadData; the shim charges all three (native/shim/hooks_module.c)."""

from __future__ import annotations

from pathlib import Path

import pytest
from realkit import Runner, require

MiB = 1 << 20
DATA = Path(__file__).parents[1] / "shim" / "data"
# globals.cu's globals for sm_90 (64 MiB zero-filled, 16 bytes initialised, 1 KiB of constants
# and the addresses of two globals) in the simulated driver's 2 MiB pages.
GLOBALS = 66 * MiB

SCRIPT = """
    import inside, rt
    from pathlib import Path
    cudart = rt.Cudart({major})
    assert cudart.lib.cudaFree(None) == 0  # the context, before the first figure
    before = inside.ledger_used(), rt.driver_used(inside.os.getpid())
    kernel = cudart.register_kernel(Path({fatbin!r}).read_bytes(), "touch")
    registered = inside.ledger_used()
    rc = cudart.launch(kernel)
    after = inside.ledger_used(), rt.driver_used(inside.os.getpid())
    inside.report(version=cudart.version(), rc=rc, before=before, registered=registered,
                  after=after)
"""


@pytest.mark.parametrize("major", [11, 12, 13])
@pytest.mark.parametrize("fatbin", ["globals_sm90_lz4.fatbin", "globals_ptx80.fatbin"])
def test_a_kernel_s_globals_are_charged_when_the_runtime_loads_its_module(
    run_real: Runner, major: int, fatbin: str
) -> None:
    """A kernel registered with the runtime, from an sm_90 cubin (LZ4-compressed, as CUDA 11
    and 12 ship them) or from compute_80 PTX only (which the driver compiles): its first launch
    loads the module, and the ledger gains its globals as the driver does, under every runtime."""
    require({11: "nvidia-cuda-runtime-cu12", 12: "nvidia-cuda-runtime-cu12", 13: "torch"}[major])
    result = run_real(SCRIPT.format(major=major, fatbin=str(DATA / fatbin)))
    assert result["version"] // 1000 == major
    assert result["rc"] == 0
    (ledger_before, driver_before), (ledger_after, driver_after) = result["before"], result["after"]
    assert driver_after - driver_before == GLOBALS  # what the driver took for the module
    assert ledger_after - ledger_before == GLOBALS, result  # charged alike
