"""Isolate 'CUDA error: invalid device context' in a backward on the simulated GPU (bare or under
cgpu). CASE picks the variant."""
import os
import torch
from figs import step

torch.zeros(1, device="cuda")


def mha_w(dropout, use_out):
    def f():
        m = torch.nn.MultiheadAttention(256, 8, batch_first=True, dropout=dropout).cuda()
        x = torch.randn(4, 128, 256, device="cuda", requires_grad=True)
        out, w = m(x, x, x, need_weights=True)
        (out.sum() + w.sum() if use_out else w.sum()).backward()
        torch.cuda.synchronize()
    return f


def softmax_mean():
    x = torch.randn(4, 8, 128, 128, device="cuda", requires_grad=True)
    x.softmax(-1).mean(dim=1).sum().backward()
    torch.cuda.synchronize()


def sum_of_two():
    x = torch.randn(64, 64, device="cuda", requires_grad=True)
    (x.sum() + (x * 3).sum()).backward()
    torch.cuda.synchronize()


def mean_dim():
    x = torch.randn(4, 8, 128, 128, device="cuda", requires_grad=True)
    x.mean(dim=1).sum().backward()
    torch.cuda.synchronize()


def compiled_bwd():
    lin = torch.nn.Linear(64, 64).cuda()
    f = torch.compile(lin)
    f(torch.randn(8, 64, device="cuda")).sum().backward()
    torch.cuda.synchronize()


cases = {"sum_of_two": sum_of_two, "mean_dim": mean_dim, "softmax_mean": softmax_mean,
         "mha_w_only_p0": mha_w(0.0, False), "mha_out_plus_w_p0": mha_w(0.0, True),
         "compiled_bwd_default_mode": compiled_bwd}
case = os.environ.get("CASE", "all")
for name, fn in cases.items():
    if case in ("all", name):
        step(name, fn)
