"""torch on the simulated GPU under a slice: nn.MultiheadAttention, nn.LSTM/GRU (cuDNN RNN),
bmm/baddbmm, conv3d (cuDNN), a CUDA graph with a static input updated across replays, then an
allocation bigger than the slice but smaller than the GPU."""
from __future__ import annotations

import os

import torch
from figs import MiB, figs, step

GiB = 1 << 30
torch.zeros(1, device="cuda")
figs("init", torch_version=torch.__version__, cudnn=torch.backends.cudnn.version(),
     device=torch.cuda.get_device_name(0),
     props_total_MiB=torch.cuda.get_device_properties(0).total_memory / MiB)


def mha():
    m = torch.nn.MultiheadAttention(256, 8, batch_first=True, dropout=0.1).cuda()
    x = torch.randn(4, 128, 256, device="cuda", requires_grad=True)
    out, w = m(x, x, x, need_weights=True)
    (out.sum() + w.sum()).backward()
    m.eval()
    with torch.no_grad():  # the fused fast path (native MHA)
        fast, _ = m(x.detach(), x.detach(), x.detach(), need_weights=False)
    mh = torch.nn.MultiheadAttention(128, 4, batch_first=True).cuda().half()
    y = torch.randn(2, 64, 128, device="cuda", dtype=torch.half)
    mask = torch.triu(torch.ones(64, 64, device="cuda", dtype=torch.bool), 1)
    o16, _ = mh(y, y, y, attn_mask=mask)
    torch.cuda.synchronize()
    return dict(shapes=[list(out.shape), list(w.shape), list(fast.shape), list(o16.shape)],
                grad=list(x.grad.shape))


def rnn():
    lstm = torch.nn.LSTM(128, 256, num_layers=2, batch_first=True, bidirectional=True).cuda()
    seq = torch.randn(8, 50, 128, device="cuda", requires_grad=True)
    o, (h, c) = lstm(seq)
    o.sum().backward()
    gru = torch.nn.GRU(64, 64, num_layers=1).cuda().half()
    g, hg = gru(torch.randn(20, 4, 64, device="cuda", dtype=torch.half))
    packed = torch.nn.utils.rnn.pack_padded_sequence(seq.detach(), [50, 40, 30, 30, 20, 10, 5, 1],
                                                     batch_first=True)
    po, _ = lstm(packed)
    torch.cuda.synchronize()
    return dict(lstm=[list(o.shape), list(h.shape)], gru=list(g.shape),
                packed=list(po.data.shape), cudnn_rnn=torch.backends.cudnn.enabled)


def bmm():
    out = []
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        a = torch.randn(16, 128, 64, device="cuda", dtype=dt)
        b = torch.randn(16, 64, 96, device="cuda", dtype=dt)
        c = torch.randn(16, 128, 96, device="cuda", dtype=dt)
        out.append(list(torch.bmm(a, b).shape))
        out.append(list(torch.baddbmm(c, a, b, beta=0.5, alpha=2.0).shape))
    a = torch.randn(4, 3, 32, 16, device="cuda")  # broadcast batched matmul via matmul
    out.append(list(torch.matmul(a, torch.randn(16, 8, device="cuda")).shape))
    torch.cuda.synchronize()
    return dict(shapes=out)


def conv3d():
    conv = torch.nn.Conv3d(4, 8, 3, padding=1).cuda()
    v = torch.randn(2, 4, 16, 32, 32, device="cuda", requires_grad=True)
    y = conv(v)
    y.sum().backward()
    torch.backends.cudnn.benchmark = True
    c16 = torch.nn.Conv3d(8, 8, (3, 3, 3), stride=2).cuda().half()
    y16 = c16(torch.randn(2, 8, 16, 32, 32, device="cuda", dtype=torch.half))
    t = torch.nn.ConvTranspose3d(8, 4, 2, stride=2).cuda()(y.detach())
    torch.backends.cudnn.benchmark = False
    torch.cuda.synchronize()
    return dict(shapes=[list(y.shape), list(y16.shape), list(t.shape)], grad=list(conv.weight.grad.shape))


def graph():
    lin = torch.nn.Linear(256, 256).cuda()
    static_in = torch.zeros(32, 256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            lin(static_in).relu()
    torch.cuda.current_stream().wait_stream(side)
    before = torch.cuda.memory_reserved()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = lin(static_in).relu()
    seen = []
    for i in range(5):
        static_in.copy_(torch.full((32, 256), float(i + 1)))  # host -> the graph's static input
        g.replay()
        torch.cuda.synchronize()
        seen.append(float(static_in[0, 0].item()))  # bytes are real: the copy lands
    g.reset()
    return dict(static_in_after_each_replay=seen, out_shape=list(static_out.shape),
                pool_growth_MiB=(torch.cuda.memory_reserved() - before) / MiB)


for name, fn in (("MultiheadAttention", mha), ("LSTM/GRU cuDNN", rnn), ("bmm/baddbmm", bmm),
                 ("conv3d cuDNN", conv3d), ("CUDA graph static input", graph)):
    step(name, fn)


def too_large():
    size = int(os.environ.get("CHECK_BIG", str(int(3.5 * GiB))))
    try:
        big = torch.empty(size, dtype=torch.uint8, device="cuda")
        del big
        return dict(asked_MiB=size / MiB, error="none: allocated")
    except torch.OutOfMemoryError as exc:
        return dict(asked_MiB=size / MiB, error=f"torch.OutOfMemoryError: {exc}")


step("3.5 GiB tensor after these", too_large)
torch.cuda.empty_cache()
figs("after empty_cache")
