"""Model architecture: the built-in table of HF `config.json` values (pdctl/data/models.yaml).

`ModelConfig` holds only what capacity planning needs. `model_config` builds one from a
HF config dict (the caller reads the file) or from the built-in table, by model name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, PositiveInt

from pdctl.capacity import tables


class ModelEntry(BaseModel):
    """What every entry of pdctl/data/models.yaml must give (with its family's values); any
    other config.json key is kept as it is."""

    model_config = ConfigDict(extra="allow", strict=True, defer_build=True)

    hidden_size: PositiveInt
    num_hidden_layers: PositiveInt
    num_attention_heads: PositiveInt
    num_key_value_heads: PositiveInt
    intermediate_size: PositiveInt
    vocab_size: PositiveInt
    max_position_embeddings: PositiveInt
    tie_word_embeddings: bool
    torch_dtype: str


def load_table(path: Path | None = None) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(canonical name -> config.json values, alias -> canonical name) of models.yaml."""
    where, doc = tables.read("models.yaml", path)
    families = tables.section(where, doc, "families")
    models: dict[str, dict[str, Any]] = {}
    for name, own in tables.section(where, doc, "models").items():
        entry = f"models.{name}"
        family = tables.mapping(where, entry, own).get("family")
        base = tables.refer(where, f"{entry}.family", family, families) if family else {}
        config = {**tables.mapping(where, f"families.{family}", base)}
        config.update((k, v) for k, v in own.items() if k != "family")
        tables.check(where, entry, config, ModelEntry)
        models[name] = config
    aliases = tables.section(where, doc, "aliases")
    for alias, name in aliases.items():
        tables.refer(where, f"aliases.{alias}", name, models)
    return models, aliases


# Canonical name -> the HF config.json values that matter here (pdctl/data/models.yaml).
BUILTIN, _ALIASES = load_table()

# Name suffixes that do not change the architecture or the weights.
_NEUTRAL_SUFFIXES = (
    "-instruct", "-chat", "-hf", "-base", "-it", "-2507", "-0324", "-0528", "-2506", "-v0.1",
    "-v0.2", "-v0.3",
)


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
    # hybrid linear-attention / Mamba models (capacity.hybrid.HybridConfig): only
    # `hybrid.full_layers` keep KV per token, the others one state per sequence
    hybrid: Any = None
    # multi-token-prediction layers (DeepSeek num_nextn_predict_layers, Qwen3-Next
    # mtp_num_hidden_layers): speculative method mtp's draft (capacity.speculative)
    mtp_layers: int = 0

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
    ("qwen3-", "Qwen3ForCausalLM"), ("llama-", "LlamaForCausalLM"),
    ("deepseek-r1-distill-llama", "LlamaForCausalLM"), ("mistral-7b", "MistralForCausalLM"),
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
        ("-fp8", "fp8"), ("-awq", "awq"), ("-gptq-int4", "gptq"), ("-gptq", "gptq"),
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
