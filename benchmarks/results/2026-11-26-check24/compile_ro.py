"""torch.compile(mode="reduce-overhead") of a small nn.Module on the simulated GPU under a slice:
inductor generates Triton kernels, Triton compiles them, cudagraph trees record and replay."""
from __future__ import annotations

import time

import torch
from figs import figs, step

torch.zeros(1, device="cuda")
figs("init")


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(128, 256)
        self.b = torch.nn.Linear(256, 64)
        self.norm = torch.nn.LayerNorm(256)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.norm(self.a(x)))).softmax(-1)


def compiled():
    from torch._dynamo.utils import counters
    model = MLP().cuda().eval()
    cm = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(32, 128, device="cuda")
    t0 = time.monotonic()
    outs = []
    with torch.no_grad():
        for i in range(6):
            x.copy_(torch.full((32, 128), float(i)))
            outs.append(cm(x))
    torch.cuda.synchronize()
    took = time.monotonic() - t0
    from torch._inductor import cudagraph_trees
    mgr = cudagraph_trees.get_manager(0, create_if_none_exists=False)
    return dict(out=list(outs[-1].shape), seconds=round(took, 1),
                inductor_counters={k: v for k, v in counters["inductor"].items() if isinstance(v, int)},
                graphs_recorded=repr(mgr.graph_counter) if mgr is not None else None,
                cudagraph_tree_manager=mgr is not None)


def compiled_train():
    model = MLP().cuda()
    cm = torch.compile(model, mode="reduce-overhead")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        x = torch.randn(32, 128, device="cuda")
        cm(x).sum().backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()
    return dict(grad_ok=True)


step("torch.compile reduce-overhead inference (6 calls)", compiled)
step("torch.compile reduce-overhead training (4 steps)", compiled_train)
