"""CUDA_MODULE_LOADING=EAGER on the simulated GPU: libcudart 12.9 / 13.0 through ctypes (no torch),
then torch. Prints the runtime's error for each."""
import os, sys
sys.path.insert(0, "/work/main/tests/realstack")
import rt
for major in (12, 13):
    c = rt.Cudart(major)
    try:
        print(f"libcudart {major} cudaMemGetInfo:", c.mem_get_info())
    except AssertionError as exc:
        print(f"libcudart {major}: FAILS", exc)
import torch
try:
    torch.zeros(1, device="cuda"); print("torch init: works")
except Exception as exc:
    print("torch init: FAILS", type(exc).__name__, str(exc)[:200])
