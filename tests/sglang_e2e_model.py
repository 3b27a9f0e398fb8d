"""A tiny random-weight Llama with a local word-level tokenizer, for CPU serving tests."""
from __future__ import annotations

from pathlib import Path

VOCAB = 1000


def build_tiny_llama(out: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    specials = ["<unk>", "<s>", "</s>"]
    words = specials + [f"w{i}" for i in range(VOCAB - len(specials))]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>",
                                        eos_token="</s>")
    tokenizer.save_pretrained(out)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=4096,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    import torch

    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out)
    return out


if __name__ == "__main__":
    import sys

    print(build_tiny_llama(Path(sys.argv[1])))
