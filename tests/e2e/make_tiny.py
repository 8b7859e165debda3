"""Build a tiny random Llama model (about 2 MB) with its own tokenizer, for e2e tests.

Usage: python make_tiny.py DIR. Deterministic (fixed seeds); nothing is downloaded.
Head size 32 (hidden 128 / 4 heads): vLLM's CPU attention backend rejects 16.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

WORDS = (
    "the quick brown fox jumps over lazy dog vllm cpu deploy prefill decode cache token "
    "model server request router host engine spec plan render apply health metric port "
    "block layer head batch"
).split()

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def corpus(rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    pseudo = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 7))) for _ in range(600)]
    vocab = WORDS + pseudo
    return [" ".join(rng.choice(vocab) for _ in range(rng.randint(4, 16))) for _ in range(1500)]


def main(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    rng = random.Random(7)
    torch.manual_seed(7)
    out.mkdir(parents=True, exist_ok=True)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=["<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(rng), trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    config = LlamaConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=tok.get_vocab_size(),
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=bos,
        eos_token_id=tok.token_to_id("</s>"),
        pad_token_id=tok.token_to_id("<pad>"),
        torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    print(f"tiny model written to {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
