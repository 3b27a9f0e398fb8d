"""A tiny random-weight Llama with a local word-level tokenizer, for CPU serving tests."""
from __future__ import annotations

from pathlib import Path

VOCAB = 1000


# The chat variant's template: ChatML, as Qwen's (lcr.lpc.templates splits it back).
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CHATML_SPECIALS = ["<|im_start|>", "<|im_end|>"]


def word_tokenizer(words: list[str] | None = None):
    """Word-level tokenizer: ``w0``, ``w1``, ... by default; with ``words``, those words
    (real text round-trips, spaced) plus ChatML's markers and template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>"]
    chat = words is not None
    vocab = specials + (list(dict.fromkeys([*CHATML_SPECIALS, "system", "user", "assistant", *words])) if chat
                        else [f"w{i}" for i in range(VOCAB - len(specials))])
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>",
                                        eos_token="</s>")
    if chat:
        tokenizer.add_special_tokens({"additional_special_tokens": CHATML_SPECIALS})
        tokenizer.chat_template = CHATML
    return tokenizer


# Shapes. "tiny": a forward costs next to nothing, so serving measures the scheduler's own
# overhead. "small": a prompt token's prefill costs tens of microseconds of CPU, so, as
# on a GPU serving a real model, the forward outweighs the scheduler and a cached prefix
# saves time.
SIZES = {"tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4},
         "small": {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 4}}


def build_tiny_llama(out: Path, words: list[str] | None = None, size: str = "tiny") -> Path:
    """The tiny model (or another of ``SIZES``); ``words``: its chat variant (see ``word_tokenizer``)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = word_tokenizer(words)
    tokenizer.save_pretrained(out)
    shape = SIZES[size]
    config = LlamaConfig(vocab_size=len(tokenizer), **shape, num_key_value_heads=shape["num_attention_heads"],
                         max_position_embeddings=4096, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    import torch

    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out)
    return out


if __name__ == "__main__":
    import sys

    print(build_tiny_llama(Path(sys.argv[1])))
