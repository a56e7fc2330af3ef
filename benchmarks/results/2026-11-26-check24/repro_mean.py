"""Narrow the 'invalid device context' of mean(dim=1) backward: main thread vs another thread."""
import os
import threading
import torch
from figs import step

torch.zeros(1, device="cuda")
x = torch.randn(4, 8, 128, 128, device="cuda")


def fwd_mean():
    x.mean(dim=1); torch.cuda.synchronize()


def expand_div_main():
    g = torch.ones(4, 128, 128, device="cuda").unsqueeze(1).expand(4, 8, 128, 128) / 8
    torch.cuda.synchronize()


def in_thread(fn):
    def run():
        err = []
        def body():
            try:
                fn()
            except Exception as exc:
                err.append(exc)
        t = threading.Thread(target=body); t.start(); t.join()
        if err:
            raise err[0]
    return run


def ones_main():
    torch.ones(64, device="cuda").expand(8, 64).contiguous(); torch.cuda.synchronize()


def sum_bwd_thread_like():
    y = torch.randn(4, 8, 128, 128, device="cuda", requires_grad=True)
    y.sum(dim=1).sum().backward(); torch.cuda.synchronize()


cases = {"fwd_mean_main": fwd_mean, "expand_div_main": expand_div_main,
         "expand_div_other_thread": in_thread(expand_div_main), "fwd_mean_other_thread": in_thread(fwd_mean),
         "ones_expand_other_thread": in_thread(ones_main), "sum_dim_bwd": sum_bwd_thread_like}
for name, fn in cases.items():
    step(name, fn)
