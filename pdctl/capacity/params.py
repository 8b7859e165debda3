"""HF config dict -> ModelConfig: shapes, parameter counts (dense, MoE, MLA) and weight widths."""

from __future__ import annotations

import difflib
from dataclasses import replace
from typing import Any

from pdctl.capacity.hybrid import hybrid_config
from pdctl.capacity.models import (
    BUILTIN,
    ModelConfig,
    builtin_architecture,
    builtin_config,
    normalize,
)
from pdctl.errors import SpecError


def _get(config: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        value = config.get(key)
        if value is not None:
            return value
    return default


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs nest the language model under `text_config` / `llm_config`."""
    for key in ("text_config", "llm_config", "language_config"):
        inner = config.get(key)
        if isinstance(inner, dict) and "num_hidden_layers" in inner:
            merged = {**inner}
            if "quantization_config" in config and "quantization_config" not in merged:
                merged["quantization_config"] = config["quantization_config"]
            return merged
    return config


def weight_bits(quant: dict[str, Any] | None) -> tuple[float, float, str | None]:
    """(bits for linear layers, bits for expert layers, method) from `quantization_config`."""
    if not quant:
        return 16.0, 16.0, None
    method = str(quant.get("quant_method", "")).lower()
    if method == "mxfp4":  # gpt-oss: experts in 4-bit with one 8-bit scale per 32 values
        return 16.0, 4.25, method
    bits = quant.get("bits") or quant.get("w_bit") or quant.get("num_bits")
    if bits is None:
        bits = _group_weights(quant, "num_bits")
    if bits is None:
        bits = 8 if "fp8" in method or "int8" in method or "w8" in method else 16
    bits = float(bits)
    if bits < 8:  # group scales (and zeros): about 0.25 bit per weight at group size 128
        bits += 0.25
    return bits, bits, method or None


def _group_weights(quant: dict[str, Any], key: str) -> Any:
    """The first compressed-tensors `config_groups.*.weights.<key>` that is set, else None."""
    groups = quant.get("config_groups") or {}
    for group in groups.values() if isinstance(groups, dict) else ():
        weights = group.get("weights") if isinstance(group, dict) else None
        if isinstance(weights, dict) and weights.get(key):
            return weights[key]
    return None


def weight_block(quant: dict[str, Any] | None) -> tuple[int, int] | None:
    """(block_n, block_k) of block-quantised weights: fp8's `weight_block_size`, or
    compressed-tensors' `config_groups.*.weights.block_structure`; None when not blocked."""
    if not quant:
        return None
    block = quant.get("weight_block_size") or _group_weights(quant, "block_structure")
    if not isinstance(block, (list, tuple)) or len(block) != 2:
        return None
    try:
        n, k = int(block[0]), int(block[1])
    except (TypeError, ValueError):
        return None
    return (n, k) if n > 0 and k > 0 else None


def sliding_layers(config: dict[str, Any], layers: int) -> tuple[int | None, int]:
    """(window, how many layers use it): `layer_types` (gpt-oss, Qwen3-style configs),
    Gemma's `sliding_window_pattern` (every Nth layer global) or Gemma 2's alternation,
    Llama 4's `attention_chunk_size` (3 of 4 layers chunked), else a plain
    `sliding_window` on every layer (Mistral v0.1) unless `use_sliding_window` is false."""
    window = config.get("sliding_window") or config.get("attention_chunk_size")
    if not isinstance(window, int) or window <= 0 or config.get("use_sliding_window") is False:
        return None, 0
    kinds = config.get("layer_types")
    if isinstance(kinds, list) and kinds:
        kinds = kinds[:layers]
        return window, sum(1 for k in kinds if "sliding" in str(k) or "chunk" in str(k))
    pattern = config.get("sliding_window_pattern")
    if isinstance(pattern, int) and pattern > 1:
        return window, layers - layers // pattern
    model_type = str(config.get("model_type", ""))
    if model_type.startswith("gemma2"):
        return window, layers // 2
    if "attention_chunk_size" in config and not config.get("sliding_window"):
        return window, layers - layers // 4
    return window, layers


def vision_tower(raw: dict[str, Any], text_hidden: int) -> tuple[float, int, int, int]:
    """(params, hidden, intermediate, patches per token) of a multimodal config's vision
    tower and projector (`vision_config`); zeros for text-only models.

    Per layer 4 x hidden^2 (q, k, v, o) and a gated (3 x) or plain (2 x) MLP; the patch
    embedding (3 channels x patch^2 x hidden); the projector merges `spatial_merge_size`^2
    patches into one token and maps them to the language model's width (merge + two linear
    layers, as Pixtral/Mistral 3 and Qwen2-VL do). Mistral-Small-3.2: 0.44 B, 0.82 GiB.
    """
    vision = raw.get("vision_config")
    if not isinstance(vision, dict):
        return 0.0, 0, 0, 1
    hidden = int(_get(vision, "hidden_size", "embed_dim", "width", default=0) or 0)
    layers = int(_get(vision, "num_hidden_layers", "depth", "layers", default=0) or 0)
    if hidden <= 0 or layers <= 0:
        return 0.0, 0, 0, 1
    inter = int(_get(vision, "intermediate_size", default=4 * hidden))
    act = str(_get(vision, "hidden_act", "hidden_activation", default="gelu")).lower()
    gated = "silu" in act or "swiglu" in act
    patch, merge = _patch_merge(raw, vision)
    per_layer = 4 * hidden * hidden + (3 if gated else 2) * hidden * inter + 4 * hidden
    merged = hidden * merge * merge
    projector = (merged * hidden if merge > 1 else 0) + hidden * text_hidden
    projector += text_hidden * text_hidden
    params = layers * per_layer + 3 * patch * patch * hidden + projector
    return float(params), hidden, inter, max(1, merge * merge)


def _patch_merge(raw: dict[str, Any], vision: dict[str, Any]) -> tuple[int, int]:
    """(patch size, spatial merge size) of a vision tower (the merge size may sit outside)."""
    merge = _get(raw, "spatial_merge_size", default=_get(vision, "spatial_merge_size", default=1))
    return int(_get(vision, "patch_size", default=14)), int(merge)


# Qwen2-VL / Qwen2.5-VL image processors resize an image to at most `max_pixels` (12845056 =
# 16384 x 28 x 28 in their preprocessor_config.json); vLLM's dummy image is that size
# (qwen2_vl.py `get_image_size_with_most_features`, `get_max_image_tokens`).
QWEN_VL_MAX_PIXELS = 12845056


def vision_item_tokens(raw: dict[str, Any]) -> int:
    """Language-model tokens of the largest single image vLLM profiles the encoder on.

    Qwen2-VL family (`vision_config` with `depth`, patches merged 2 x 2): max_pixels /
    (patch x merge)^2 (16384). Pixtral (Mistral 3): (image_size / patch / merge) columns x
    rows plus one break token a row (3080 for Mistral-Small-3.2). Other towers with an
    `image_size`: (image_size / patch)^2 / merge^2. 0 when the config does not say.
    """
    vision = raw.get("vision_config")
    if not isinstance(vision, dict):
        return 0
    patch, merge = _patch_merge(raw, vision)
    if "depth" in vision:  # Qwen2-VL / Qwen2.5-VL tower
        pixels = int(_get(raw, "max_pixels", default=QWEN_VL_MAX_PIXELS))
        return pixels // (patch * merge) ** 2
    size = int(_get(vision, "image_size", default=0) or 0)
    if size <= 0 or patch <= 0:
        return 0
    side = size // patch // max(1, merge)
    if str(vision.get("model_type", "")) == "pixtral":
        return side * (side + 1)
    return side * side


def parse_config(
    name: str, raw: dict[str, Any], params_billion: float | None, *, from_table: bool = False
) -> ModelConfig:
    """Read the shapes from a HF config dict; compute total and active parameters."""
    config = _text_config(raw)
    try:
        layers = int(config["num_hidden_layers"])
        hidden = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
    except (KeyError, TypeError, ValueError):
        raise SpecError(
            "config.json lacks num_hidden_layers / hidden_size / num_attention_heads",
            path="model.config", fix="point `model.config` at the model's HF config.json",
        ) from None
    kv_heads = int(_get(config, "num_key_value_heads", default=heads))
    head_dim = int(_get(config, "head_dim", default=hidden // heads))
    vocab = int(_get(config, "vocab_size", default=32000))
    intermediate = int(_get(config, "intermediate_size", "ffn_hidden_size", default=4 * hidden))
    max_position = int(_get(config, "max_position_embeddings", "seq_length", default=4096))
    # transformers' own default where config.json omits it: True for Gemma's configs
    # (Gemma2Config/GemmaConfig `tie_word_embeddings=True`), False for Llama, Qwen, Mistral,
    # DeepSeek (their configs pass False)
    tied_by_default = str(config.get("model_type", "")).startswith("gemma")
    tie = bool(config.get("tie_word_embeddings", tied_by_default))

    kv_lora = config.get("kv_lora_rank")
    mla_latent = None
    if kv_lora:
        rope = int(_get(config, "qk_rope_head_dim", default=64))
        nope = int(_get(config, "qk_nope_head_dim", default=128))
        v_dim = int(_get(config, "v_head_dim", default=128))
        q_lora = config.get("q_lora_rank")
        mla_latent = int(kv_lora) + rope
        q = (
            hidden * heads * (nope + rope)
            if not q_lora
            else (hidden * q_lora + q_lora * heads * (nope + rope))
        )
        kv_b = int(kv_lora) * heads * (nope + v_dim)
        attn = q + hidden * mla_latent + kv_b + heads * v_dim * hidden
    else:
        bias = (heads + 2 * kv_heads) * head_dim if config.get("attention_bias") else 0
        attn = hidden * (heads + 2 * kv_heads) * head_dim + heads * head_dim * hidden + bias

    experts = int(_get(config, "num_local_experts", "n_routed_experts", "num_experts", default=0))
    per_token = int(_get(config, "num_experts_per_tok", "experts_per_token", default=0))
    moe_inter = int(_get(config, "moe_intermediate_size", default=intermediate))
    shared = int(_get(config, "n_shared_experts", default=0)) * moe_inter + int(
        _get(config, "shared_expert_intermediate_size", default=0)
    )
    dense_layers = int(_get(config, "first_k_dense_replace", default=0)) if experts else layers
    moe_layers = layers - dense_layers

    dense_mlp = 3 * hidden * intermediate
    pattern = config.get("hybrid_override_pattern")
    if isinstance(pattern, str) and not experts:
        # Nemotron-H: each layer is ONE block, M Mamba, * attention, - MLP; the MLP is
        # up + down with relu2, no gate (vLLM 0.23.0 nemotron_h.py NemotronHMLP l.95-128)
        dense_layers, moe_layers = pattern.count("-"), 0
        dense_mlp = 2 * hidden * intermediate
    expert_one = 3 * hidden * moe_inter
    router = hidden * experts
    other_per_moe_layer = router + 3 * hidden * shared
    norms = 2 * hidden
    embed = vocab * hidden * (1 if tie else 2)

    expert_total = moe_layers * experts * expert_one
    hybrid = hybrid_config(config)
    # hybrid: attention in the full-attention layers only, the linear/Mamba mixers elsewhere
    attn_all = layers * attn if hybrid is None else hybrid.full_layers * attn + hybrid.params
    non_expert = (
        attn_all
        + layers * norms
        + dense_layers * dense_mlp
        + moe_layers * other_per_moe_layer
        + embed
        + hidden
    )
    params = float(non_expert + expert_total)
    # Per token a decode step uses every weight except the unused embedding rows (the input
    # embedding of an untied model is one row per token) and the unrouted experts.
    unused_embed = 0 if tie else vocab * hidden
    active = float(non_expert - unused_embed + moe_layers * per_token * expert_one)
    if params_billion:
        scale = params_billion * 1e9 / params
        params, active, expert_total = params * scale, active * scale, int(expert_total * scale)
        embed = int(embed * scale)

    bits, expert_bits, method = weight_bits(config.get("quantization_config"))
    window, sliding = sliding_layers(config, layers)
    vision, v_hidden, v_inter, v_patches = vision_tower(raw, hidden)
    v_item = vision_item_tokens(raw)
    dtype = str(_get(config, "torch_dtype", "dtype", default="bfloat16"))
    return ModelConfig(
        name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        vocab=vocab, intermediate=intermediate, max_position=max_position, params=params,
        active_params=active, expert_params=float(expert_total), embed_params=float(embed),
        experts=experts, experts_per_token=per_token, mla_latent=mla_latent,
        moe_intermediate=moe_inter if experts else 0, shared_intermediate=shared,
        dense_layers=dense_layers if experts else layers, vision_params=vision,
        vision_hidden=v_hidden, vision_intermediate=v_inter, vision_patches_per_token=v_patches,
        vision_item_tokens=v_item, sliding_window=window, sliding_layers=sliding, hybrid=hybrid,
        mtp_layers=int(
            _get(config, "num_nextn_predict_layers", "mtp_num_hidden_layers", default=0) or 0
        ),
        torch_dtype=dtype, weight_bits=bits, expert_weight_bits=expert_bits, quantization=method,
        weight_block=weight_block(config.get("quantization_config")), from_table=from_table,
        architecture=str((raw.get("architectures") or [""])[0] or builtin_architecture(name)),
    )


def nearest_dense(params_billion: float) -> str:
    """The built-in dense model whose size is closest to `params_billion` (for shape guesses)."""
    best, best_gap = "llama-3.1-8b", float("inf")
    for key, config in BUILTIN.items():
        if any(k in config for k in ("num_experts", "num_local_experts", "n_routed_experts")):
            continue
        params = parse_config(key, config, None).params / 1e9
        gap = abs(params - params_billion) / params_billion
        if gap < best_gap:
            best, best_gap = key, gap
    return best


def model_config(
    name: str, hf_config: dict[str, Any] | None = None, params_billion: float | None = None
) -> ModelConfig:
    """Build the ModelConfig: from `hf_config` if given, else the built-in table.

    `params_billion` overrides the computed parameter count. With only `params_billion` (no
    config, not in the table) the shapes (layers, KV heads...) are borrowed from the built-in
    dense model of the nearest size, and `shapes_from` names it: KV figures are then estimates.
    Raises SpecError (path `model.name`) when no source is given.
    """
    config = hf_config if hf_config is not None else builtin_config(name)
    if config is not None:
        return parse_config(name, config, params_billion, from_table=hf_config is None)
    if params_billion:
        donor = nearest_dense(params_billion)
        model = parse_config(name, BUILTIN[donor], params_billion)
        return replace(model, shapes_from=donor)
    near = nearest_names(name)
    raise SpecError(
        f"pdctl does not know the architecture of {name!r}", path="model.name",
        fix=(f"did you mean {' or '.join(near)}? Else s" if near else "s")
        + "et `model.config` to the model's local config.json (exact figures), or "
        "`model.paramsBillion` (weights exact, KV estimated); "
        + (
            f"docs/capacity.md lists the {len(BUILTIN)} built-in models"
            if near
            else "built-in models: " + builtin_list()
        ),
    )


def nearest_names(name: str, most: int = 2) -> list[str]:
    """The built-in model names closest to `name` (a misspelling: 'Qwen3-32B-Instrukt' ->
    'qwen3-32b'), a quantisation suffix kept; [] when none is close."""
    key = normalize(name)
    suffix = next((q for q in ("-fp8", "-awq", "-gptq-int4", "-gptq") if key.endswith(q)), "")
    base = normalize(key[: len(key) - len(suffix)]) if suffix else key
    # a known name with words added ('-instrukt', '-v2') counts first: the longest prefix
    prefixed = sorted((k for k in BUILTIN if base.startswith(k + "-")), key=len, reverse=True)
    close = difflib.get_close_matches(base, sorted(BUILTIN), n=most, cutoff=0.75)
    found = list(dict.fromkeys([*prefixed[:1], *close]))[:most]
    return [k + suffix for k in found]


def builtin_list(budget: int = 150) -> str:
    """The built-in model names, whole ones only: as many as `budget` characters hold, then
    'and N more (docs/capacity.md)' (an error line is capped, so a full list would be cut)."""
    names = sorted(BUILTIN)
    shown: list[str] = []
    for name in names:
        if len(", ".join([*shown, name])) > budget:
            break
        shown.append(name)
    rest = len(names) - len(shown)
    return ", ".join(shown) + (f" and {rest} more (docs/capacity.md lists them)" if rest else "")
