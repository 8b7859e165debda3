"""Build a tiny real LoRA adapter for the tiny model with peft (nothing is downloaded).

Usage: python make_lora.py MODEL_DIR OUT_DIR:SEED [OUT_DIR:SEED ...] (one adapter per seed, in
one process). Rank 8 on q/k/v/o and the MLP; lora_A and
lora_B drawn large (std 0.5; peft would start B at zero), so the adapter changes the greedy
continuation of any prompt."""

from __future__ import annotations

import sys
from pathlib import Path

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def main(model_dir: Path, out: Path, seed: int) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    base = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    config = LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, init_lora_weights=False)
    model = get_peft_model(base, config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.normal_(0.0, 0.5)
    model.save_pretrained(out, safe_serialization=True)
    print(f"LoRA adapter written to {out}")


if __name__ == "__main__":
    for arg in sys.argv[2:]:
        folder, _, seed = arg.rpartition(":")
        main(Path(sys.argv[1]), Path(folder), int(seed))
