"""Hugging Face transformers (pinned in requirements.txt) on the simulator under a 4 GiB slice:
a tiny Llama made from its config (two layers, no download, token ids fed directly) generates
and takes a training step (forward, backward, AdamW); a batch too large for the slice stops
with torch's OutOfMemoryError at the slice, on a simulated GPU of 24 GiB.

Kernels compute nothing on the simulator, and generate() decides when to stop by reading a
flag the kernels compute (`unfinished_sequences.max() == 0`): here that decision is made on
the host instead, once max_new_tokens are generated, by a StopCheck that counts the length.
Everything else in the decoding loop (prefill, KV cache, one forward a token) runs as is.
"""

from __future__ import annotations

from realkit import SIM_MEMORY, SLICE, Runner, require

MODEL = """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.generation import utils as generation

    class HostStop(generation.StopCheck):
        '''Stops when the sequences reach their length, as the device flag would say.'''

        length = 0

        def __call__(self, unfinished, tokens, length):
            super().__call__(unfinished, tokens, length)
            return length >= HostStop.length

    generation.StopCheck = HostStop
    config = LlamaConfig(vocab_size=32000, hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512)
    model = LlamaForCausalLM(config).cuda()
"""


def test_tiny_llama_generates_and_trains(run_real: Runner) -> None:
    require("torch")
    require("transformers")
    result = run_real(
        MODEL
        + """
    import inside
    ids = torch.randint(0, config.vocab_size, (2, 16), device="cuda")
    HostStop.length = 16 + 8
    out = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    torch.cuda.synchronize()
    state = optimizer.state[next(model.parameters())]
    inside.report(generated=list(out.shape), steps=int(state["step"]),
                  moments=sorted(k for k in state if k != "step"), loss=list(loss.shape))
    """
    )
    assert result["generated"] == [2, 24], result
    assert result["steps"] == 1 and result["moments"] == ["exp_avg", "exp_avg_sq"], result
    assert result["loss"] == [], result


def test_too_large_a_batch_stops_at_the_slice(run_real: Runner) -> None:
    """64 sequences of 256 tokens: 2 GiB of logits and as much for the loss; more than the
    slice holds, well within the 24 GiB simulated GPU."""
    require("torch")
    require("transformers")
    code = (
        MODEL
        + """
    import inside, os
    ids = torch.randint(0, config.vocab_size, (64, 256), device="cuda")
    try:
        model(input_ids=ids, labels=ids).loss.backward()
        error = {"type": "", "message": "no error"}
    except Exception as exc:
        error = inside.describe(exc)
    del ids
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    ledger = inside.ledger_used() if "CGPU_LEDGER_DIR" in os.environ else 0
    inside.report(error=error, total=total, ledger=ledger)
    """
    )
    result = run_real(code)
    assert result["error"]["type"] == "torch.OutOfMemoryError", result["error"]
    assert f"total capacity of {SLICE >> 30}.00 GiB" in result["error"]["message"], result
    assert result["total"] == SLICE, result
    # The failed step's memory comes back: what is left is the model and the context.
    assert result["ledger"] < 512 << 20, result
    # Without the shim the same step fits the simulated GPU.
    bare = run_real(code, shim=False)
    assert bare["error"]["type"] == "" and bare["total"] == SIM_MEMORY, bare
