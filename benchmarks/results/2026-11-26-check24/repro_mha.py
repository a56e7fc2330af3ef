"""Isolate torch_nn's MultiheadAttention failure: which backward first fails with
'invalid device context'. CASE env var picks the variant."""
import os
import torch
from figs import step

torch.zeros(1, device="cuda")
case = os.environ.get("CASE", "all")


def simple():
    x = torch.randn(64, 64, device="cuda", requires_grad=True)
    (x * 2).sum().backward()
    torch.cuda.synchronize()


def mha(dropout, need):
    def f():
        m = torch.nn.MultiheadAttention(256, 8, batch_first=True, dropout=dropout).cuda()
        x = torch.randn(4, 128, 256, device="cuda", requires_grad=True)
        out, w = m(x, x, x, need_weights=need)
        out.sum().backward()
        torch.cuda.synchronize()
    return f


def dropout_only():
    x = torch.randn(64, 64, device="cuda", requires_grad=True)
    torch.nn.functional.dropout(x, 0.1).sum().backward()
    torch.cuda.synchronize()


def matmul_bwd():
    x = torch.randn(64, 64, device="cuda", requires_grad=True)
    (x @ x).sum().backward()
    torch.cuda.synchronize()


cases = {"simple": simple, "matmul_bwd": matmul_bwd, "dropout_bwd": dropout_only,
         "mha_p0_noweights": mha(0.0, False), "mha_p0_weights": mha(0.0, True),
         "mha_p01_weights": mha(0.1, True), "mha_p01_noweights": mha(0.1, False)}
for name, fn in cases.items():
    if case in ("all", name):
        step(name, fn)
