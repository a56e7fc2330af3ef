"""CuPy's kernels on the simulator under a 4 GiB slice: ElementwiseKernel, ReductionKernel and
RawKernel compile with NVRTC (the one cuda-pathfinder finds for CuPy: torch's NVRTC 13.0 in this
venv), load through the driver and launch. Kernels compute nothing on the simulator: the check
is that CuPy's whole path (source, NVRTC, cubin, module, launch) runs, and that nothing but
the rounding of module globals escapes the ledger."""

from __future__ import annotations

from pathlib import Path

from realkit import Runner, require


def test_cupy_kernels_compile_with_nvrtc_and_launch(run_real: Runner, tmp_path: Path) -> None:
    require("cupy-cuda12x")
    result = run_real(
        """
        import os, cupy, inside, rt
        x = cupy.arange(1 << 16, dtype=cupy.float32)
        twice = cupy.ElementwiseKernel("float32 a", "float32 b", "b = a * 2 + 1", "twice")
        norm = cupy.ReductionKernel("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0",
                                    "l2norm")
        inc = cupy.RawKernel(r'''
        extern "C" __global__ void inc(float* p, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) p[i] += 1.0f;
        }''', "inc")

        def gap():
            return rt.driver_used(os.getpid()) - inside.ledger_used()

        def run():
            y, n = twice(x), norm(x)
            inc((x.size // 256,), (256,), (x, cupy.int32(x.size)))
            (x * 3).sum()
            cupy.cuda.Device().synchronize()
            return [y.shape[0], n.ndim]

        shapes = run()
        first_gap = gap()
        run()
        inside.report(nvrtc=list(cupy.cuda.nvrtc.getVersion()), shapes=shapes,
                      regs=inc.attributes["num_regs"], first_gap=first_gap, gap=gap())
        """,
        env={"CUPY_CACHE_DIR": str(tmp_path / "cupy")},  # compiled here, not from a cache
    )
    assert result["nvrtc"][0] in (12, 13), result  # NVRTC loaded and answered
    assert result["shapes"] == [1 << 16, 0], result
    assert result["regs"] > 0, result  # the loaded function's attributes, from the driver
    # Beyond the ledger: the simulator's rounding of module globals to 2 MiB pages (the shim
    # charges what NVRTC's cubins and the runtime's fatbins declare), once; running again adds
    # nothing.
    assert 0 <= result["first_gap"] <= 64 << 20, result
    assert result["gap"] == result["first_gap"], result
