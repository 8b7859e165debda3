"""`model.maxModelLen` against the model's context length, as vLLM derives it from the model's
config.json (vllm/config/model.py `_get_and_verify_max_len`): vLLM refuses to start with a
longer maxModelLen unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. Pure: the caller reads the config
(`model.config`) or takes it from pdctl's model table."""

from __future__ import annotations

from typing import Any

from pdctl.errors import SpecError
from pdctl.spec.model import Spec

# The config keys vLLM reads a length from; the smallest one found wins.
LENGTH_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
    "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len",
)
# RoPE types whose max_position_embeddings is already the scaled length (no factor applied).
UNSCALED_ROPE = ("su", "longrope", "llama3")
ALLOW_LONG = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
_TEXT_KEYS = ("text_config", "llm_config", "language_config")  # multimodal: the language model


def derived_max_len(config: dict[str, Any]) -> tuple[int, str] | None:
    """(the model's maximum length, the key it came from) as vLLM derives it, or None when
    the config names no length (vLLM then takes maxModelLen as given)."""
    for key in _TEXT_KEYS:
        if isinstance(config.get(key), dict):
            config = {**config, **config[key]}
            break
    found = [(n, k) for k in LENGTH_KEYS if (n := _number(config.get(k))) is not None]
    if not found:
        return None
    length, key = min(found, key=lambda f: f[0])
    model_max = _number(config.get("model_max_length"))
    if model_max is not None:  # Command-R, Cohere: this key wins
        length, key = model_max, "model_max_length"
    rope = _rope(config)
    if rope and "gemma3" not in str(config.get("model_type", "")):
        factor = 1.0
        for params in rope:
            kind = params.get("rope_type", params.get("type"))
            if kind in UNSCALED_ROPE:
                continue
            factor = float(params.get("factor", factor))
            if kind == "yarn" and _number(params.get("original_max_position_embeddings")):
                length = float(params["original_max_position_embeddings"])
                key = "rope_scaling.original_max_position_embeddings x factor"
            elif factor != 1.0:
                key = f"{key} x rope_scaling.factor"
        length *= factor
    return int(length), key


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    return float(value) if ok else None


def _rope(config: dict[str, Any]) -> list[dict[str, Any]]:
    """rope_scaling (Transformers 4) or rope_parameters (5: one dict, or one per layer type)."""
    rope = config.get("rope_parameters") or config.get("rope_scaling")
    if not isinstance(rope, dict):
        return []
    if rope and all(isinstance(v, dict) for v in rope.values()):
        return list(rope.values())
    return [rope]


def allows_long(spec: Spec) -> bool:
    """VLLM_ALLOW_LONG_MAX_MODEL_LEN set to 1 or true (as vLLM reads it) for every engine."""

    def on(env: dict[str, str]) -> bool:
        return env.get(ALLOW_LONG, "0").strip().lower() in ("1", "true")

    if on(spec.engine.env):
        return True
    roles = [r for r in (spec.prefill, spec.decode) if r is not None]
    return bool(roles) and all(on(r.env) for r in roles)


def check_max_model_len(spec: Spec, config: dict[str, Any] | None, where: str) -> None:
    """SpecError when maxModelLen exceeds the length vLLM derives from `config` (from `where`:
    model.config or pdctl's model table). Nothing known, nothing set: accepted."""
    wanted = spec.model.max_model_len
    if wanted is None or config is None or allows_long(spec):
        return
    derived = derived_max_len(config)
    if derived is None or wanted <= derived[0]:
        return
    model_max = _number(config.get("model_max_length"))
    if model_max is not None and wanted <= model_max:
        return
    limit, key = derived
    raise SpecError(
        f"maxModelLen {wanted} is longer than {spec.model.name}'s context, {limit} tokens "
        f"({key} in {where}); vLLM refuses to start",
        path="model.maxModelLen",
        fix=f"set maxModelLen to at most {limit}, or set engine.env {ALLOW_LONG}: '1' if the "
        "model really takes longer sequences",
    )
