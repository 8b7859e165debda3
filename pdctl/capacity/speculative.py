"""Speculative decoding's GPU memory: the draft's weights and its KV layers (issue 37 item 3.2).

vLLM loads the draft beside the target before it profiles memory (so its weights come out of
the KV budget) and gives the draft's attention layers KV cache in the same pool as the
target's (the KV cache spec is built from every attention layer, the draft's included), so a
token costs the target's layers plus the draft's. Known here:

- `mtp`: the target's own multi-token-prediction layers, `num_nextn_predict_layers` (DeepSeek;
  Qwen3-Next too, 1 when absent: qwen3_next_mtp.py l.60) or `mtp_num_hidden_layers` (Qwen3.5;
  Qwen3-Next's config has it too) (vllm/config/speculative.py `hf_config_override`, 0.23.0
  l.301-313, l.438-443, l.463): each counted as one average decoder
  layer of the target plus its 2h x h input projection; embeddings shared with the target
  (vllm/v1/spec_decode/llm_base_proposer.py `_maybe_share_embeddings`, l.1293-1360).
- `draft_model` / `eagle` / `eagle3`: a draft whose config is `speculative.config` (read by
  the CLI) or in the built-in table (by the `speculative.model` name): its own layers and
  weights (embeddings counted: an upper bound). An EAGLE-3 head (`draft_vocab_size` in its
  config) is counted as vLLM 0.23.0 builds it (model_executor/models/llama_eagle3.py): its
  decoder layers, the first one's attention reading 2h (embedding + hidden state), the `fc`
  projection of the target's three auxiliary hidden states (3h x h) and an lm_head over the
  draft vocabulary; the embedding is the target's (`_maybe_share_embeddings`, shared when
  the checkpoint has none, as EAGLE-3 heads ship).

Anything else is unknown and `pdctl plan` says so. Docs: docs/capacity.md#speculative-decoding-
and-kv-offloading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pdctl.capacity.memory import dtype_bytes, kv_bytes_per_token, weights_bytes_per_gpu
from pdctl.capacity.models import ModelConfig, builtin_config
from pdctl.capacity.params import parse_config


@dataclass(frozen=True)
class Draft:
    """The draft of one role, per GPU: `layers` attention layers of `layer_kv` bytes a token
    each (the target's page when the shapes match), `weights` bytes, `num_spec` tokens."""

    what: str
    layers: int
    kv_per_token: int
    weights: int
    num_spec: int


def draft_of(spec: Any, target: ModelConfig, tp: int, dtype: str, kv_dtype: str) -> Draft | str:
    """The draft's memory for a role's `speculative` section, or why it is not known."""
    n = spec.num_speculative_tokens
    if spec.method == "ngram":
        return Draft("ngram (no draft model)", 0, 0, 0, n)
    attn_layers = target.hybrid.full_layers if target.hybrid is not None else target.layers
    layer_kv = kv_bytes_per_token(target, tp, 1, kv_dtype, dtype) // max(1, attn_layers)
    if spec.method == "mtp":
        if target.mtp_layers <= 0:
            return "the target's config has no num_nextn_predict_layers / mtp_num_hidden_layers"
        width = dtype_bytes(dtype, target)
        embed = int(target.embed_params * width / tp)
        per_layer = (weights_bytes_per_gpu(target, tp, 1, dtype) - embed) // target.layers
        proj = 2 * target.hidden * target.hidden * width // tp
        layers = target.mtp_layers
        return Draft(
            f"{layers} MTP layer(s) of the target", layers, layers * layer_kv,
            layers * (per_layer + proj), n,
        )
    given = getattr(spec, "draft_config", None)
    raw = given if given is not None else builtin_config(str(spec.model or ""))
    if raw is None:
        return (f"the draft {spec.model} is not in pdctl's model table (pdctl/data/models.yaml):"
                " give its config.json as speculative.config")
    draft = parse_config(str(spec.model), raw, None, from_table=given is None)
    draft_tp = spec.draft_tensor_parallel or tp
    kv = kv_bytes_per_token(draft, draft_tp, 1, kv_dtype, dtype)
    if raw.get("draft_vocab_size"):
        return Draft(
            f"EAGLE-3 head {spec.model} ({draft.layers} layer(s))", draft.layers, kv,
            _eagle3_weights(draft, int(raw["draft_vocab_size"]), draft_tp, dtype), n,
        )
    return Draft(
        f"draft {spec.model} ({draft.layers} layers)", draft.layers, kv,
        weights_bytes_per_gpu(draft, draft_tp, 1, dtype), n,
    )


def _eagle3_weights(d: ModelConfig, draft_vocab: int, tp: int, dtype: str) -> int:
    """An EAGLE-3 head's weight bytes on one GPU (llama_eagle3.py, 0.23.0): per layer q, k, v
    (the first layer reads 2h), o and the gated MLP; fc (3h x h, replicated); the lm_head over
    the draft vocabulary. The embedding is shared with the target."""
    h, q, kv = d.hidden, d.heads * d.head_dim, d.kv_heads * d.head_dim
    qkv = sum((2 * h if i == 0 else h) * (q + 2 * kv) for i in range(d.layers))
    sharded = qkv + d.layers * (q * h + 3 * h * d.intermediate) + draft_vocab * h
    return int((sharded / tp + 3 * h * h) * dtype_bytes(dtype, d))
