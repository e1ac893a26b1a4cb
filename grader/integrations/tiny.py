"""A tiny random Llama and a word-level tokenizer, built in memory: for CPU examples and tests of trainers.

Nothing is downloaded; the model is random (seeded), so its completions are noise. Examples and tests say
what each completion stands for (a candidate patch, a pass flag) instead of reading it from the text.
Needs torch, transformers and tokenizers (the ``integrations`` extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["WORDS", "tiny_llama"]

WORDS = ("[PAD]", "[UNK]", "[EOS]", "fix", "the", "bug", "in", "stock", "py", "return", "total")
"""The default vocabulary: enough words for the prompts the examples use."""


def tiny_llama(words: Sequence[str] = WORDS, seed: int = 0) -> tuple[Any, Any]:
    """A one-layer random Llama over `words` and its tokenizer (``[PAD]``, ``[UNK]``, ``[EOS]`` first).

    Args:
        words: the vocabulary; the first three are the pad, unknown and end-of-sequence tokens.
        seed: torch seed for the random weights.
    Returns:
        ``(model, tokenizer)``: a ``LlamaForCausalLM`` and a ``PreTrainedTokenizerFast``.
    Raises:
        ImportError: torch, transformers or tokenizers is not installed.
    """
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    backend = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[1]))
    backend.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=words[0], eos_token=words[2], unk_token=words[1]
    )
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(words),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config), tokenizer
