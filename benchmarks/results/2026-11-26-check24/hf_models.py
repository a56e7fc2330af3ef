"""transformers on the simulated GPU under a slice: GPT2LMHeadModel and
BertForSequenceClassification from configs (no download), forward+backward+optimizer step in
fp32 and under torch.autocast(bfloat16); then a too-large batch."""
from __future__ import annotations

import torch
import transformers
from figs import figs, step
from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

torch.zeros(1, device="cuda")
figs("init", transformers=transformers.__version__)
gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=5000, n_positions=256, n_embd=128, n_layer=2,
                                  n_head=4)).cuda()
bert = BertForSequenceClassification(BertConfig(vocab_size=5000, hidden_size=128, num_hidden_layers=2,
                                                num_attention_heads=4, intermediate_size=256,
                                                num_labels=3)).cuda()


def train(model, batch, optim, autocast):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        out = model(**batch)
    out.loss.backward()
    optim.step()
    optim.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    st = optim.state[next(model.parameters())]
    return dict(loss_dtype=str(out.loss.dtype), logits=list(out.logits.shape),
                logits_dtype=str(out.logits.dtype),
                opt_state=sorted(k for k in st if k != "step"), steps=int(st.get("step", 0)))


ids = torch.randint(0, 5000, (4, 128), device="cuda")
gopt = torch.optim.AdamW(gpt2.parameters(), lr=1e-4)
step("GPT2LMHeadModel fwd+bwd+AdamW fp32", lambda: train(gpt2, dict(input_ids=ids, labels=ids), gopt, False))
step("GPT2LMHeadModel fwd+bwd+AdamW autocast bf16", lambda: train(gpt2, dict(input_ids=ids, labels=ids), gopt, True))
bbatch = dict(input_ids=ids, attention_mask=torch.ones_like(ids),
              token_type_ids=torch.zeros_like(ids), labels=torch.randint(0, 3, (4,), device="cuda"))
bopt = torch.optim.SGD(bert.parameters(), lr=1e-3, momentum=0.9)
step("BertForSequenceClassification fwd+bwd+SGD fp32", lambda: train(bert, bbatch, bopt, False))
step("BertForSequenceClassification fwd+bwd+SGD autocast bf16", lambda: train(bert, bbatch, bopt, True))


def too_large():
    big = torch.randint(0, 5000, (256, 256), device="cuda")  # fp32 logits alone 1.22 GiB
    try:
        gpt2(input_ids=big, labels=big).loss.backward()
        return dict(error="none: the batch fit")
    except torch.OutOfMemoryError as exc:
        return dict(error=f"torch.OutOfMemoryError: {exc}")


step("GPT2 too-large batch 256x256 fwd+bwd", too_large)
gopt.zero_grad(set_to_none=True)
torch.cuda.empty_cache()
figs("after empty_cache")
