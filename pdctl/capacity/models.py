"""Model architecture: a built-in table of HF `config.json` values and their parsing.

`ModelConfig` holds only what capacity planning needs. `model_config` builds one from a
HF config dict (the caller reads the file) or from the built-in table, by model name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_LLAMA3 = {"vocab_size": 128256, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
_QWEN2 = {
    "vocab_size": 152064,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "attention_bias": True,
    "max_position_embeddings": 32768,
}
_QWEN2_SMALL = {**_QWEN2, "vocab_size": 151936, "tie_word_embeddings": True}
_QWEN3 = {
    "vocab_size": 151936,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "head_dim": 128,
    "max_position_embeddings": 40960,
}
_QWEN3_SMALL = {**_QWEN3, "tie_word_embeddings": True}
_DEEPSEEK_V3 = {
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
}
_GPT_OSS = {
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "experts_per_token": 4,
    "vocab_size": 201088,
    "max_position_embeddings": 131072,
    "sliding_window": 128,
    "tie_word_embeddings": False,
    "attention_bias": True,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "mxfp4"},
}

# Canonical name -> the HF config.json values that matter here (from the models' HF repos).
BUILTIN: dict[str, dict[str, Any]] = {
    "llama-3-8b": {
        **_LLAMA3,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 8192,
    },
    "llama-3.1-8b": {
        **_LLAMA3,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
    },
    "llama-3-70b": {
        **_LLAMA3,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "max_position_embeddings": 8192,
    },
    "llama-3.1-70b": {
        **_LLAMA3,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
    },
    "llama-3.3-70b": {
        **_LLAMA3,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
    },
    "qwen2.5-0.5b": {
        **_QWEN2_SMALL,
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
    },
    "qwen2.5-1.5b": {
        **_QWEN2_SMALL,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
    },
    "qwen2.5-3b": {
        **_QWEN2_SMALL,
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "num_hidden_layers": 36,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
    },
    "qwen2.5-7b": {
        **_QWEN2,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
    },
    "qwen2.5-14b": {
        **_QWEN2,
        "hidden_size": 5120,
        "intermediate_size": 13824,
        "num_hidden_layers": 48,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
    },
    "qwen2.5-32b": {
        **_QWEN2,
        "hidden_size": 5120,
        "intermediate_size": 27648,
        "num_hidden_layers": 64,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
    },
    "qwen2.5-72b": {
        **_QWEN2,
        "hidden_size": 8192,
        "intermediate_size": 29568,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
    },
    "qwen2-57b-a14b": {
        **_QWEN2,
        "vocab_size": 151936,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "num_experts": 64,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 2560,
        "shared_expert_intermediate_size": 20480,
    },
    "qwen3-0.6b": {
        **_QWEN3_SMALL,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
    },
    "qwen3-1.7b": {
        **_QWEN3_SMALL,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
    },
    "qwen3-4b": {
        **_QWEN3_SMALL,
        "hidden_size": 2560,
        "intermediate_size": 9728,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
    },
    "qwen3-8b": {
        **_QWEN3,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
    },
    "qwen3-14b": {
        **_QWEN3,
        "hidden_size": 5120,
        "intermediate_size": 17408,
        "num_hidden_layers": 40,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
    },
    "qwen3-32b": {
        **_QWEN3,
        "hidden_size": 5120,
        "intermediate_size": 25600,
        "num_hidden_layers": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
    },
    "qwen3-30b-a3b": {
        **_QWEN3,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
    },
    "qwen3-235b-a22b": {
        **_QWEN3,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 94,
        "num_attention_heads": 64,
        "num_key_value_heads": 4,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 1536,
    },
    "mistral-7b": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32768,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "mixtral-8x7b": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "deepseek-v2-lite": {
        "hidden_size": 2048,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "kv_lora_rank": 512,
        "q_lora_rank": None,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "intermediate_size": 10944,
        "moe_intermediate_size": 1408,
        "n_routed_experts": 64,
        "n_shared_experts": 2,
        "num_experts_per_tok": 6,
        "first_k_dense_replace": 1,
        "vocab_size": 102400,
        "max_position_embeddings": 163840,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "deepseek-v2": {
        "hidden_size": 5120,
        "num_hidden_layers": 60,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "intermediate_size": 12288,
        "moe_intermediate_size": 1536,
        "n_routed_experts": 160,
        "n_shared_experts": 2,
        "num_experts_per_tok": 6,
        "first_k_dense_replace": 1,
        "vocab_size": 102400,
        "max_position_embeddings": 163840,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "mistral-small-3.2-24b": {
        # Mistral3ForConditionalGeneration: a Pixtral vision tower in front of the text model
        "vision_config": {
            "model_type": "pixtral",
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "patch_size": 14,
            "image_size": 1540,
            "hidden_act": "silu",
        },
        "spatial_merge_size": 2,
        "hidden_size": 5120,
        "intermediate_size": 32768,
        "num_hidden_layers": 40,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 131072,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "deepseek-v3": _DEEPSEEK_V3,
    "deepseek-r1": _DEEPSEEK_V3,
    "gpt-oss-20b": {**_GPT_OSS, "num_hidden_layers": 24, "num_local_experts": 32},
    "gpt-oss-120b": {**_GPT_OSS, "num_hidden_layers": 36, "num_local_experts": 128},
}

# Name suffixes that do not change the architecture or the weights.
_NEUTRAL_SUFFIXES = (
    "-instruct",
    "-chat",
    "-hf",
    "-base",
    "-it",
    "-2507",
    "-0324",
    "-0528",
    "-2506",
    "-v0.1",
    "-v0.2",
    "-v0.3",
)
_ALIASES = {
    "meta-llama-3-8b": "llama-3-8b",
    "meta-llama-3-70b": "llama-3-70b",
    "meta-llama-3.1-8b": "llama-3.1-8b",
    "meta-llama-3.1-70b": "llama-3.1-70b",
    "deepseek-coder-v2-lite": "deepseek-v2-lite",
    "deepseek-coder-v2": "deepseek-v2",
    "deepseek-v2.5": "deepseek-v2",
    "deepseek-v3.1": "deepseek-v3",
    "deepseek-r1-distill-qwen-14b": "qwen2.5-14b",
    "qwen2-7b": "qwen2.5-7b",
    "deepseek-r1-distill-qwen-32b": "qwen2.5-32b",
    "deepseek-r1-distill-llama-8b": "llama-3.1-8b",
    "deepseek-r1-distill-llama-70b": "llama-3.3-70b",
}


@dataclass(frozen=True)
class ModelConfig:
    """The architecture numbers capacity planning uses (all counts, no bytes).

    `params` and `active_params` are computed from the shapes (or given); MoE models have
    `active_params` < `params` (only `experts_per_token` experts run per token).
    `mla_latent` is kv_lora_rank + qk_rope_head_dim for DeepSeek MLA models, else None.
    `vision_params` counts the vision tower and its projector (0 for text-only models).
    `weight_bits` is the storage width of the linear layers (16 unquantized, 8 for fp8/int8,
    about 4.25 for 4-bit formats with scales); `expert_weight_bits` may differ (gpt-oss mxfp4).
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int
    max_position: int
    params: float
    active_params: float
    expert_params: float = 0.0
    embed_params: float = 0.0
    experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0
    dense_layers: int = 0
    mla_latent: int | None = None
    sliding_window: int | None = None
    sliding_layers: int = 0  # layers with sliding-window (or chunked-local) attention
    torch_dtype: str = "bfloat16"
    weight_bits: float = 16.0
    expert_weight_bits: float = 16.0
    quantization: str | None = None
    # (block_n, block_k) of block-quantised weights (fp8 `weight_block_size`): vLLM refuses a
    # TP that splits a projection off a block boundary (pdctl.plan.parallel)
    weight_block: tuple[int, int] | None = None
    from_table: bool = False
    shapes_from: str | None = None
    architecture: str = ""  # config.json's `architectures[0]` (vLLM picks its runner by it)
    # multimodal: the vision tower (`vision_config`), planned next to the language model
    vision_params: float = 0.0  # tower + projector, kept at the activation dtype
    vision_hidden: int = 0
    vision_intermediate: int = 0
    vision_patches_per_token: int = 1  # patches merged into one language-model token
    # language-model tokens of the largest single image (vLLM's `get_mm_max_tokens_per_item`);
    # 0: not known from the config (the encoder profile then takes max_num_batched_tokens)
    vision_item_tokens: int = 0

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.mla_latent is not None

    @property
    def mlp_width(self) -> int:
        """MLP intermediate width one token goes through (routed experts + shared for MoE)."""
        if not self.is_moe:
            return self.intermediate
        routed = self.experts_per_token * self.moe_intermediate + self.shared_intermediate
        return max(routed, self.intermediate if self.dense_layers else 0)


# The architecture of the built-in models vLLM 0.23.0's V2 model runner takes by default
# (pdctl.capacity.sampler.v2_runner): the table's keys that start so
_ARCHITECTURES = (
    ("qwen3-", "Qwen3ForCausalLM"),
    ("llama-", "LlamaForCausalLM"),
    ("deepseek-r1-distill-llama", "LlamaForCausalLM"),
    ("mistral-7b", "MistralForCausalLM"),
)


def builtin_architecture(name: str) -> str:
    """config.json's `architectures[0]` of a built-in model, where it matters ('' else)."""
    key = normalize(name)
    for suffix in ("-fp8", "-awq", "-gptq-int4", "-gptq"):
        key = key.removesuffix(suffix)
    if "num_experts" in BUILTIN.get(key, {}):
        return "Qwen3MoeForCausalLM" if key.startswith("qwen3-") else ""
    return next((arch for prefix, arch in _ARCHITECTURES if key.startswith(prefix)), "")


def normalize(name: str) -> str:
    """'meta-llama/Llama-3.1-8B-Instruct' -> 'llama-3.1-8b' (the table's key form)."""
    base = name.rstrip("/").split("/")[-1].lower()
    changed = True
    while changed:
        changed = False
        for suffix in _NEUTRAL_SUFFIXES:
            if base.endswith(suffix):
                base = base[: -len(suffix)]
                changed = True
    return _ALIASES.get(base, base)


def builtin_config(name: str) -> dict[str, Any] | None:
    """The built-in HF config values for a model name, or None. '-FP8' names get fp8 weights."""
    key = normalize(name)
    quant: dict[str, Any] | None = None
    for suffix, method in (
        ("-fp8", "fp8"),
        ("-awq", "awq"),
        ("-gptq-int4", "gptq"),
        ("-gptq", "gptq"),
    ):
        if key.endswith(suffix):
            key = normalize(key[: -len(suffix)])
            quant = {"quant_method": method, "bits": 8 if method == "fp8" else 4}
            if method == "fp8" and key.startswith("qwen3"):
                # Qwen's own FP8 checkpoints (Qwen/Qwen3-*-FP8) are block-quantised, 128 x 128
                # ("weight_block_size": [128, 128] in their config.json)
                quant["weight_block_size"] = [128, 128]
    config = BUILTIN.get(key)
    if config is None:
        return None
    return {**config, "quantization_config": quant} if quant else dict(config)
