"""Hypothesis: on the simulated GPU the first launch of a kernel not yet loaded (CUDA lazy
loading) fails with 'invalid device context' when it happens on a thread other than the one that
made the context. CASE=main|thread|thread_setdevice."""
import os
import threading
import torch
from figs import step

torch.zeros(1, device="cuda")
x = torch.randn(4, 8, 128, 128, device="cuda")


def first_div():
    (x / 7).sum(); torch.cuda.synchronize()


def in_thread(fn, set_device):
    def run():
        err = []
        def body():
            try:
                if set_device:
                    torch.cuda.set_device(0)
                fn()
            except Exception as exc:
                err.append(exc)
        t = threading.Thread(target=body); t.start(); t.join()
        if err:
            raise err[0]
    return run


case = os.environ.get("CASE", "thread")
fn = {"main": first_div, "thread": in_thread(first_div, False),
      "thread_setdevice": in_thread(first_div, True)}[case]
step(f"first (x/7) launch in {case} (CUDA_MODULE_LOADING={os.environ.get('CUDA_MODULE_LOADING', 'default')})", fn)
step("x.mean(1) backward after", lambda: torch.randn(4, 8, 16, 16, device="cuda", requires_grad=True).mean(dim=1).sum().backward() or torch.cuda.synchronize())
