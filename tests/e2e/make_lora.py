"""Write a tiny real LoRA adapter for the tiny Llama model, in PEFT's on-disk format, with torch
and safetensors only (both come with vLLM; nothing is downloaded, no model is loaded).

Usage: python make_lora.py MODEL_DIR OUT_DIR:SEED [OUT_DIR:SEED ...] (one adapter per seed).
Rank 8 on q/k/v/o and the MLP of every layer; lora_A and lora_B drawn large (std 0.5; a
trained adapter would start B at zero), so the adapter changes the greedy continuation of any
prompt. The format is what `peft.PeftModel.save_pretrained` writes: adapter_config.json
(peft_type LORA, r, lora_alpha, target_modules) and adapter_model.safetensors with tensors
`base_model.model.model.layers.N.<block>.<proj>.lora_{A,B}.weight` of shapes [r, in] and
[out, r] (https://github.com/huggingface/peft/blob/main/src/peft/utils/save_and_load.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

RANK, ALPHA = 8, 16


def shapes(config: dict) -> dict[str, tuple[str, int, int]]:
    """Every target projection: (block, in features, out features) from the model's config."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv = config.get("num_key_value_heads", heads) * head_dim
    q = heads * head_dim
    return {
        "q_proj": ("self_attn", hidden, q),
        "k_proj": ("self_attn", hidden, kv),
        "v_proj": ("self_attn", hidden, kv),
        "o_proj": ("self_attn", q, hidden),
        "gate_proj": ("mlp", hidden, inter),
        "up_proj": ("mlp", hidden, inter),
        "down_proj": ("mlp", inter, hidden),
    }


def main(model_dir: Path, out: Path, seed: int) -> None:
    import torch
    from safetensors.torch import save_file

    config = json.loads((model_dir / "config.json").read_text())
    targets = shapes(config)
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for proj, (block, fan_in, fan_out) in targets.items():
            key = f"base_model.model.model.layers.{layer}.{block}.{proj}"
            for part, shape in (("lora_A", (RANK, fan_in)), ("lora_B", (fan_out, RANK))):
                tensors[f"{key}.{part}.weight"] = torch.randn(shape, generator=generator) * 0.5
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    adapter = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(model_dir),
        "r": RANK,
        "lora_alpha": ALPHA,
        "lora_dropout": 0.0,
        "target_modules": sorted(targets),
        "bias": "none",
        "fan_in_fan_out": False,
        "modules_to_save": None,
        "use_rslora": False,
        "use_dora": False,
        "inference_mode": True,
    }
    (out / "adapter_config.json").write_text(json.dumps(adapter, indent=2) + "\n")
    print(f"LoRA adapter written to {out}")


if __name__ == "__main__":
    for arg in sys.argv[2:]:
        folder, _, seed = arg.rpartition(":")
        main(Path(sys.argv[1]), Path(folder), int(seed))
