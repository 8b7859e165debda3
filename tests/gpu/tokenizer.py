"""Write a word-level tokenizer whose vocabulary is a model's whole vocab_size ("t0" ... "tN"),
so that an engine with dummy weights (`--load-format dummy`) can serve text: every id it samples
decodes, and a prompt of n words "t<id>" (id >= 4; 0-3 are <unk>, <s>, </s>, <pad>) is n
tokens. Nothing is downloaded.

usage: python3 tokenizer.py MODEL_DIR   (reads MODEL_DIR/config.json, writes the tokenizer there)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(folder: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    size = json.loads((folder / "config.json").read_text())["vocab_size"]
    # The special tokens must not be words of the vocabulary: an added token is matched inside
    # the raw text before the whitespace split, so a bos token "t1" cut "t17" into "t1" + "7".
    special = ("<unk>", "<s>", "</s>", "<pad>")
    vocab = {name: i for i, name in enumerate(special)}
    vocab.update({f"t{i}": i for i in range(len(special), size)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", pad_token="<pad>")
    fast.save_pretrained(folder)
    # transformers 5 names its own class (TokenizersBackend), which transformers 4 cannot load:
    # the image has 5.17 while a bundle built with vLLM 0.23.0's closure can bring 4.57, and the
    # engine must read what this wrote before or after either is installed. Both load this one.
    config = folder / "tokenizer_config.json"
    saved = json.loads(config.read_text())
    saved["tokenizer_class"] = "PreTrainedTokenizerFast"
    saved.pop("backend", None)
    config.write_text(json.dumps(saved, indent=2) + "\n")
    print(f"{folder}: word-level tokenizer of {size} tokens")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
