"""LoRA memory (docs/lora.md): what vLLM reserves on each GPU for `--max-loras` adapters at
`--max-lora-rank`, and what one adapter's weights take (its rank, its target modules).

vLLM wraps every supported layer when LoRA is on and, at model load, allocates per layer
`lora_a_stacked` (max_loras, 1, rank, in) and `lora_b_stacked` (max_loras, 1, out, rank) per
slice (vllm/lora/layers/base_linear.py, column_parallel_linear.py `create_lora_weights`):
column-parallel layers keep A whole and split B's out over TP, row-parallel layers split A's in
over TP and keep B whole. The embedding and lm_head get (vocab x rank) + (hidden x rank) each
(vocab_parallel_embedding.py, logits_processor.py). The buffers are made in load_model, so
vLLM's "Model loading took" includes them; pdctl counts them with the weights."""

from __future__ import annotations

from dataclasses import dataclass

from pdctl.capacity.models import ModelConfig

# A Llama-style decoder's LoRA-able linears: (in, out) per layer, at TP 1.
MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def module_dims(model: ModelConfig) -> dict[str, tuple[int, int]]:
    q, kv = model.heads * model.head_dim, model.kv_heads * model.head_dim
    h, i = model.hidden, model.intermediate
    return {
        "q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
        "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h),
    }


def gpu_elements_per_rank(model: ModelConfig, tp: int, layers: int, embeddings: bool) -> int:
    """Elements per LoRA slot per unit of rank vLLM reserves on one GPU: qkv_proj (3 slices,
    A: rank x hidden each, B: (q+k+v)/TP x rank), o_proj (row: A rank x q/TP, B hidden x rank),
    gate_up_proj (2 slices, A: rank x hidden, B: intermediate/TP x rank each), down_proj (row:
    A rank x intermediate/TP, B hidden x rank); + embed_tokens and lm_head (first/last stage)."""
    d = module_dims(model)
    h, i = model.hidden, model.intermediate
    q, kv = d["q_proj"][1], d["k_proj"][1]
    per_layer = (3 * h + (q + 2 * kv) // tp) + (q // tp + h) + (2 * h + 2 * i // tp) + (i // tp + h)
    extra = 2 * (model.vocab + h) if embeddings else 0
    return per_layer * layers + extra


@dataclass(frozen=True)
class LoraShape:
    """The spec's LoRA limits for the capacity plan (spec model.lora)."""

    slots: int  # --max-loras
    rank: int  # --max-lora-rank
    cpu_slots: int  # --max-cpu-loras (vLLM's default: max_loras)
    adapter_bytes: int  # the largest declared adapter's weights (0: none declared)


def gpu_bytes(model: ModelConfig, lora: LoraShape | None, tp: int, layers: int, dtype: int) -> int:
    """Bytes vLLM reserves on one GPU for `slots` adapters at `rank` (0 without LoRA)."""
    if lora is None:
        return 0
    return lora.slots * lora.rank * gpu_elements_per_rank(model, tp, layers, True) * dtype


def adapter_bytes(model: ModelConfig, rank: int, modules: tuple[str, ...], dtype: int) -> int:
    """One adapter's weights: A (rank x in) + B (out x rank) per targeted linear per layer.
    Modules pdctl does not know (e.g. lm_head) count as hidden x hidden."""
    dims = module_dims(model)
    total = 0
    for name in modules or MODULES:
        fan_in, fan_out = dims.get(name, (model.hidden, model.hidden))
        total += rank * (fan_in + fan_out)
    return total * model.layers * dtype


def host_bytes(lora: LoraShape | None) -> int:
    """Host memory for the adapters vLLM keeps in its CPU cache (`--max-cpu-loras`)."""
    return 0 if lora is None else lora.cpu_slots * lora.adapter_bytes
