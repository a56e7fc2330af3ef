"""Write two tiny causal LMs for vLLM (config + local tokenizer, no weights; --load-format dummy):
a Qwen2ForCausalLM (qkv bias, GQA, tied embeddings) with a chat template, and a GPT2LMHeadModel.
Run by .venv-vllm's Python: `python make_models.py OUTDIR`.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

WORDS = [f"w{i}" for i in range(480)] + ["hello", "world", "the", "a", "cgpu", "slice", "user:", "assistant:", "system:"]
SPECIAL = ["<unk>", "<s>", "</s>"]
MAX_LEN = 256
CHAT = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)

QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_act": "silu",
    "max_position_embeddings": MAX_LEN,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "use_sliding_window": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}

GPT2 = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "n_embd": 128,
    "n_head": 2,
    "n_layer": 2,
    "n_positions": MAX_LEN,
    "n_ctx": MAX_LEN,
    "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-5,
    "torch_dtype": "float16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def write(directory: Path, config: dict, chat: bool) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    vocab = {tok: i for i, tok in enumerate(SPECIAL + WORDS)}
    (directory / "config.json").write_text(json.dumps(dict(config, vocab_size=len(vocab)), indent=1))
    (directory / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", model_max_length=MAX_LEN)
    if chat:
        fast.chat_template = CHAT
    fast.save_pretrained(str(directory))


if __name__ == "__main__":
    out = Path(sys.argv[1])
    write(out / "tiny-qwen2", QWEN2, chat=True)
    write(out / "tiny-gpt2", GPT2, chat=False)
    mistral = dict(QWEN2, architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=None,
                   tie_word_embeddings=False, rope_theta=10000.0, head_dim=64)
    write(out / "tiny-mistral", mistral, chat=True)
    print("wrote", sorted(p.name for p in out.iterdir()))
