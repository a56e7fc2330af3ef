"""Write a tiny causal language model's directory for vLLM: a Llama config and a tokenizer
built here with the `tokenizers` library; no weights (vLLM runs it with --load-format dummy).

Run by the vLLM venv's Python: `python tiny_model.py DIR`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

WORDS = [f"w{i}" for i in range(480)] + ["hello", "world", "the", "a", "cgpu", "slice"]
SPECIAL = ["<unk>", "<s>", "</s>"]
MAX_LEN = 512

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": MAX_LEN,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def write(directory: Path) -> None:
    """Write config.json, generation_config.json and the tokenizer into `directory`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    vocab = {tok: i for i, tok in enumerate(SPECIAL + WORDS)}
    config = dict(CONFIG, vocab_size=len(vocab))
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    gen = {"bos_token_id": 1, "eos_token_id": 2}
    (directory / "generation_config.json").write_text(json.dumps(gen))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        model_max_length=MAX_LEN,
    )
    fast.save_pretrained(str(directory))


if __name__ == "__main__":
    write(Path(sys.argv[1]))
