"""Hybrid models: linear-attention (Gated DeltaNet) and Mamba-2 layers next to full attention.

Only the full-attention layers keep KV per token. Every linear/Mamba layer keeps one state per
sequence (a convolution state and a recurrent/SSM state), whatever the sequence's length. vLLM
0.23.0 keeps both in one block pool of one page size: it raises the attention block size until
one attention page holds a Mamba state and pads the Mamba page up to it
(`Platform._align_hybrid_block_size`, vllm/platforms/interface.py l.529-700), groups the layers
by type (`_get_kv_cache_groups_uniform_page_size`, v1/core/kv_cache_utils.py l.1074-1194) and
reports tokens as concurrency x max_model_len (`_report_kv_cache_config`, l.1720-1749).
Sources with line links: docs/capacity.md#hybrid-models-linear-attention-and-mamba.

Pure: the caller passes the parsed config.json.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# the smallest kernel block size of the CUDA attention backends (FlashAttention, FlashInfer:
# multiples of 16) and vLLM's default --block-size: the alignment of the hybrid block size
KERNEL_BLOCK = 16


@dataclass(frozen=True)
class HybridConfig:
    """The state-holding layers of a hybrid model, as vLLM's state-shape calculators read them
    (vllm/model_executor/layers/mamba/mamba_utils.py, `MambaStateShapeCalculator`).

    kind: "gdn" (Qwen3-Next Gated DeltaNet) or "mamba2" (Granite 4.0-H, Nemotron-H).
    conv_dim: channels of the causal convolution state (split over TP; Mamba-2 groups padded
    to a multiple of TP first); conv_kernel: its kernel (the state keeps kernel - 1 columns,
    plus one per speculative token). ssm_heads x ssm_a x ssm_b: the recurrent state (heads
    split over TP). ssm_fp32: the SSM state is float32 (Nemotron-H's default).
    """

    kind: str
    linear_layers: int
    full_layers: int
    conv_dim: int
    conv_kernel: int
    ssm_heads: int
    ssm_a: int
    ssm_b: int
    n_groups: int = 0  # Mamba-2: B/C groups (conv_dim = intermediate + 2 x groups x state)
    intermediate: int = 0  # Mamba-2: heads x head_dim
    ssm_fp32: bool = False
    params: float = 0.0  # parameters of all the linear/Mamba mixers (not their MLPs)

    def state_bytes(self, tp: int, width: int, num_spec: int = 0) -> int:
        """One layer's state for one sequence on one GPU (vLLM's unpadded `MambaSpec.
        page_size_bytes`: conv + SSM state). `width`: the model dtype's bytes (the states
        follow --mamba-cache-dtype 'auto', not the KV cache's fp8)."""
        if self.kind == "mamba2":
            groups = self.n_groups + (0 if self.n_groups % tp == 0 else tp - self.n_groups)
            conv_dim = self.intermediate + 2 * groups * self.ssm_b
        else:
            conv_dim = self.conv_dim
        conv = conv_dim // tp * (self.conv_kernel - 1 + num_spec) * width
        ssm_width = 4 if self.ssm_fp32 else width
        ssm = self.ssm_heads // tp * self.ssm_a * self.ssm_b * ssm_width
        return conv + ssm


def _kinds(config: dict[str, Any], layers: int) -> list[str] | None:
    """Each layer's kind, 'full' | 'linear' | 'other' (an MLP-only layer), or None: no hybrid."""
    types = config.get("layer_types") or config.get("layers_block_type")
    if isinstance(types, list) and types:
        out = []
        for t in types[:layers]:
            t = str(t).lower()
            if "linear" in t or "mamba" in t:
                out.append("linear")
            elif "attention" in t or t == "hybrid":
                out.append("full")
            else:
                out.append("other")
        return out if "linear" in out else None
    pattern = config.get("hybrid_override_pattern")  # Nemotron-H: M mamba, * attention, - MLP
    if isinstance(pattern, str) and "M" in pattern:
        return [{"M": "linear", "*": "full"}.get(c, "other") for c in pattern[:layers]]
    interval = config.get("full_attention_interval")  # Qwen3-Next without layer_types
    if isinstance(interval, int) and interval > 0 and "linear_num_value_heads" in config:
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(layers)]
    return None


def hybrid_config(config: dict[str, Any]) -> HybridConfig | None:
    """The hybrid layers of a config.json (None: not a hybrid the planner knows)."""
    layers = int(config.get("num_hidden_layers") or 0)
    kinds = _kinds(config, layers)
    if kinds is None:
        return None
    hidden = int(config.get("hidden_size") or 0)
    linear, full = kinds.count("linear"), kinds.count("full")
    if "linear_num_value_heads" in config:  # Gated DeltaNet (qwen3_next.py get_mamba_state_shape)
        nk, nv = int(config["linear_num_key_heads"]), int(config["linear_num_value_heads"])
        dk, dv = int(config["linear_key_head_dim"]), int(config["linear_value_head_dim"])
        kernel = int(config.get("linear_conv_kernel_dim", 4))
        conv_dim = 2 * nk * dk + nv * dv
        # in_proj_qkvz + in_proj_ba + conv1d + A_log/dt_bias + norm + out_proj
        mixer = hidden * (2 * nk * dk + 2 * nv * dv) + hidden * 2 * nv
        mixer += conv_dim * kernel + 2 * nv + dv + nv * dv * hidden
        # the full-attention layers' output gate doubles q_proj (Qwen3NextAttention)
        heads, head_dim = int(config["num_attention_heads"]), int(config.get("head_dim", 0))
        gate = full * hidden * heads * head_dim if config.get("attn_output_gate", True) else 0
        return HybridConfig(
            "gdn", linear, full, conv_dim, kernel, nv, dv, dk, params=float(linear * mixer + gate)
        )
    raw_heads = config.get("mamba_n_heads", config.get("mamba_num_heads"))
    if raw_heads is None:
        return None
    heads = int(raw_heads)
    raw_dim = config.get("mamba_d_head", config.get("mamba_head_dim"))
    expand = int(config.get("mamba_expand", 2))
    # Granite's "auto": expand x hidden / heads
    head_dim = raw_dim if isinstance(raw_dim, int) else expand * hidden // heads
    inter = heads * head_dim
    groups = int(config.get("mamba_n_groups", config.get("n_groups", 1)))
    state = int(config.get("mamba_d_state", config.get("ssm_state_size", 128)))
    kernel = int(config.get("mamba_d_conv", config.get("conv_kernel", 4)))
    conv_dim = inter + 2 * groups * state
    # in_proj (z, x, B, C, dt) + conv1d + A/D/dt_bias + norm + out_proj
    mixer = hidden * (2 * inter + 2 * groups * state + heads) + conv_dim * kernel
    mixer += 3 * heads + inter + inter * hidden
    nemotron = "hybrid_override_pattern" in config
    fp32 = nemotron and str(config.get("mamba_ssm_cache_dtype", "float32")) == "float32"
    return HybridConfig(
        "mamba2", linear, full, conv_dim, kernel, heads, head_dim, state, n_groups=groups,
        intermediate=inter, ssm_fp32=fp32, params=float(linear * mixer),
    )


def hybrid_block_size(attn_token_bytes: int, state_bytes: int, block: int = KERNEL_BLOCK) -> int:
    """The attention block size vLLM sets so one page holds a state (no prefix caching:
    vLLM's default for hybrid models, `ModelConfig.is_prefix_caching_supported`):
    16 x cdiv(state, 16 x one token's bytes), at least the default 16."""
    if state_bytes <= 0 or attn_token_bytes <= 0:
        return block
    return max(block, block * math.ceil(state_bytes / (block * attn_token_bytes)))


def group_size(full: int, linear: int) -> int:
    """Layers per KV cache group: the smaller type's count, or the larger one when it is
    under 1.5 x the smaller (`_get_kv_cache_groups_uniform_page_size`)."""
    small, big = min(full, linear), max(full, linear)
    if small == 0:
        return big or 1
    return big if big < small * 1.5 else small


@dataclass(frozen=True)
class HybridLayout:
    """One GPU's block pool of a hybrid model (the same questions as memory.KvLayout).

    layer_bytes: one token of one full-attention layer; state_bytes: one sequence's state of
    one linear layer (unpadded); block_size: the raised attention block; spec_blocks: the
    extra state blocks a request keeps per speculative token (`MambaSpec.num_speculative_blocks`).
    """

    layer_bytes: int
    full_layers: int
    linear_layers: int
    state_bytes: int
    block_size: int
    spec_blocks: int = 0
    sliding_layers: int = 0  # none: memory.InstanceMemory reads it off any layout

    @property
    def page(self) -> int:
        """One block of one layer: block_size x token bytes (the Mamba page padded to it)."""
        return self.block_size * self.layer_bytes

    @property
    def group(self) -> int:
        return group_size(self.full_layers, self.linear_layers)

    @property
    def full_groups(self) -> int:
        return math.ceil(self.full_layers / self.group)

    @property
    def linear_groups(self) -> int:
        return math.ceil(self.linear_layers / self.group)

    def blocks(self, available: int) -> int:
        """available // page // group (`get_num_blocks`)."""
        if available <= 0 or self.page <= 0:
            return 0
        return available // self.page // self.group

    def blocks_per_request(self, length: int) -> int:
        """cdiv(length, block) per full group + (1 + spec) per linear group
        (`get_max_concurrency_for_kv_cache_config`, `MambaSpec.max_memory_usage_bytes`)."""
        full = self.full_groups * math.ceil(length / self.block_size)
        return full + self.linear_groups * (1 + self.spec_blocks)

    def request_bytes(self, length: int) -> int:
        """One request's bytes: its blocks x page x group."""
        return self.blocks_per_request(length) * self.page * self.group

    def sequences(self, available: int, length: int) -> int:
        if length <= 0:
            return 0
        return self.blocks(available) // self.blocks_per_request(length)

    def tokens(self, available: int, length: int) -> int:
        """vLLM's 'GPU KV cache size': int(blocks / blocks per request x max_model_len)."""
        if available <= 0 or length <= 0:
            return 0
        return int(self.blocks(available) / self.blocks_per_request(length) * length)

    def slots(self, available: int) -> int:
        """Tokens of KV the full-attention groups store at once (the states aside)."""
        return self.blocks(available) * self.block_size // max(1, self.full_groups)


def stage_layout(
    hybrid: HybridConfig, attn_token_bytes: int, tp: int, width: int, pp: int = 1,
    num_spec: int = 0,
) -> HybridLayout:
    """The layout of one pipeline stage (its share of each layer type, rounded up)."""
    state = hybrid.state_bytes(tp, width, num_spec)
    return HybridLayout(
        layer_bytes=attn_token_bytes, full_layers=math.ceil(hybrid.full_layers / pp),
        linear_layers=math.ceil(hybrid.linear_layers / pp), state_bytes=state,
        block_size=hybrid_block_size(attn_token_bytes, state), spec_blocks=num_spec,
    )
