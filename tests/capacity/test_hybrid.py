"""Hybrid linear-attention / Mamba models (issue 37 item 3.1): per-sequence state, the raised
attention block size and vLLM 0.23.0's token count (pdctl/capacity/hybrid.py).

vLLM 0.23.0 formulas (docs/capacity.md#hybrid-models-linear-attention-and-mamba):
- state of one layer, one sequence, one GPU (`MambaSpec.page_size_bytes`): conv state
  conv_dim/tp x (kernel - 1) x width + recurrent state heads/tp x a x b x width
  (`MambaStateShapeCalculator.gated_delta_net_state_shape` / `mamba2_state_shape`);
- attention block (`Platform._align_hybrid_block_size`, no prefix caching, the hybrid
  default): 16 x cdiv(state, 16 x one token's KV bytes of one layer); page = block x token;
- groups (`_get_kv_cache_groups_uniform_page_size`): group = the smaller layer count (the
  larger one when under 1.5x); blocks = available // page // group (`get_num_blocks`);
- per request (`get_max_concurrency_for_kv_cache_config`): cdiv(len, block) a full group +
  1 a linear group; "GPU KV cache size" = int(blocks / per-request blocks x max_model_len).

The two layouts below were also run through vLLM 0.23.0's own `get_kv_cache_configs` on CPU
(the 0.23.0 wheel's kv_cache_utils.py with the same FullAttentionSpec / MambaSpec layers and
available bytes): it printed "GPU KV cache size: 848,796 tokens" (3,212 blocks, 4 groups of 12)
and "715,707 tokens" (2,621 blocks, 10 groups of 4), the figures asserted here.
"""

from __future__ import annotations

import json
from pathlib import Path

from pdctl.capacity import Shape, find_gpu, instance_memory, model_config, model_fit
from pdctl.capacity.gpus import GIB
from pdctl.capacity.hybrid import group_size, hybrid_config, stage_layout
from pdctl.capacity.models import builtin_config
from tests.helpers import run_cli

# Granite 4.0-H shaped, for the arithmetic only (not a published checkpoint's numbers):
# 40 layers, full attention every 10th, Mamba-2 elsewhere
MAMBA2 = {
    "architectures": ["GraniteMoeHybridForCausalLM"], "hidden_size": 1536, "num_hidden_layers": 40,
    "num_attention_heads": 12, "num_key_value_heads": 4, "intermediate_size": 512,
    "vocab_size": 100352, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
    "layer_types": ["attention" if (i + 1) % 10 == 0 else "mamba" for i in range(40)],
    "mamba_n_heads": 48, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1,
    "mamba_d_conv": 4, "mamba_expand": 2,
}


def test_qwen3_next_layout_tp4() -> None:
    """Qwen3-Next-80B-A3B (models.yaml), TP 4, bf16, max_model_len 32,768, 10 GiB for KV.

    Layers: full_attention_interval 4 -> 12 full, 36 Gated DeltaNet.
    KV one token, one layer: 2 x max(1, 2 // 4) x 256 x 2 B = 1,024.
    conv_dim = 2 x 16 x 128 + 32 x 128 = 8,192 -> /4 x 3 x 2 B = 12,288;
    recurrent 32/4 x 128 x 128 x 2 B = 262,144; state = 274,432.
    block = 16 x cdiv(274,432, 16 x 1,024 = 16,384) = 16 x 17 = 272 (vLLM logs "Setting
    attention block size to 272 tokens"); page = 272 x 1,024 = 278,528 (state padded 1.49%).
    group = min(12, 36) = 12 -> 1 full group, 3 linear groups.
    blocks = 10,737,418,240 // 278,528 // 12 = 38,550 // 12 = 3,212.
    per request = cdiv(32,768, 272) = 121 + 3 = 124; tokens = int(3,212 / 124 x 32,768) =
    848,796; concurrency 25.90; sequences 3,212 // 124 = 25."""
    hybrid = model_config("Qwen/Qwen3-Next-80B-A3B-Instruct").hybrid
    assert (hybrid.full_layers, hybrid.linear_layers) == (12, 36)
    layout = stage_layout(hybrid, 1024, tp=4, width=2)
    assert layout.state_bytes == 274_432
    assert layout.block_size == 272
    assert layout.page == 278_528
    assert layout.group == 12
    assert layout.blocks(10 * GIB) == 3212
    assert layout.blocks_per_request(32768) == 124
    assert layout.tokens(10 * GIB, 32768) == 848_796
    assert layout.sequences(10 * GIB, 32768) == 25


def test_mamba2_layout_tp2() -> None:
    """The Mamba-2 config above, TP 2, bf16, max_model_len 8,192, 4 GiB for KV.

    n_groups 1 is padded to a multiple of TP: 1 + (2 - 1) = 2 (`extra_groups_for_head_shards`).
    intermediate = 48 x 64 = 3,072; conv_dim = 3,072 + 2 x 2 x 128 = 3,584 -> /2 x 3 x 2 B =
    10,752; SSM 48/2 x 64 x 128 x 2 B = 393,216; state = 403,968.
    KV token, layer: 2 x 4/2 x 128 x 2 B = 1,024; block = 16 x cdiv(403,968, 16,384) = 16 x 25
    = 400; page = 409,600. Layers 4 full, 36 Mamba: group 4 -> 1 full group, 9 Mamba groups.
    blocks = 4,294,967,296 // 409,600 // 4 = 10,485 // 4 = 2,621; per request cdiv(8,192, 400)
    = 21 + 9 = 30; tokens = int(2,621 / 30 x 8,192) = 715,707."""
    hybrid = hybrid_config(MAMBA2)
    assert hybrid is not None and hybrid.kind == "mamba2"
    assert (hybrid.full_layers, hybrid.linear_layers) == (4, 36)
    layout = stage_layout(hybrid, 1024, tp=2, width=2)
    assert layout.state_bytes == 403_968
    assert layout.block_size == 400
    assert layout.group == 4
    assert layout.blocks_per_request(8192) == 30
    assert layout.tokens(4 * GIB, 8192) == 715_707


def test_nemotron_pattern_fp32_state() -> None:
    """Nemotron-H: `hybrid_override_pattern` (M Mamba, * attention, - MLP) and a float32 SSM
    state by default (`NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype`).
    Pattern "M-M*M-" over 6 layers: 3 Mamba, 1 attention. TP 1, bf16:
    conv (8 x 64 + 2 x 1 x 128) x 3 x 2 B = 768 x 6 = 4,608; SSM 8 x 64 x 128 x 4 B = 262,144.
    Group: 3 < 1 x 1.5? no -> group = min = 1."""
    config = {
        "num_hidden_layers": 6, "hidden_size": 1024, "hybrid_override_pattern": "M-M*M-",
        "mamba_num_heads": 8, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 1,
        "conv_kernel": 4,
    }
    hybrid = hybrid_config(config)
    assert hybrid is not None
    assert (hybrid.full_layers, hybrid.linear_layers) == (1, 3)
    assert hybrid.state_bytes(1, 2) == 4_608 + 262_144
    assert group_size(1, 3) == 1
    assert group_size(12, 13) == 13  # under 1.5x: the larger count (gpt-oss + EAGLE's case)


def test_dense_model_is_not_hybrid() -> None:
    """Full-attention models keep their layout: no hybrid config, KvLayout or none."""
    assert model_config("llama-3.1-8b").hybrid is None
    assert hybrid_config(builtin_config("qwen3-30b-a3b") or {}) is None


def test_instance_memory_uses_hybrid_layout() -> None:
    """`pdctl plan`'s figures: the KV tokens are the hybrid layout's over vLLM's available
    memory, and a full-attention count (all 48 layers, block 16) would be about 4x as many
    bytes a token: 48 x 1,024 = 49,152 instead of 12 x 1,024 = 12,288."""
    model = model_config("qwen3-next-80b-a3b")
    shape = Shape(tp=4, dtype="auto", kv_cache_dtype="auto", max_model_len=32768, gpu="H200")
    mem = instance_memory(model, find_gpu("H200").usable_bytes, 0.9, shape)
    assert mem.kv_per_token == 12 * 1024
    assert mem.block_size == 272
    layout = stage_layout(model.hybrid, 1024, tp=4, width=2)
    assert mem.kv_tokens == layout.tokens(mem.kv_available, 32768)
    assert mem.concurrency == mem.kv_tokens / 32768
    # one sequence: 121 full blocks + 3 state blocks, each 12 layers x 278,528 B
    assert mem.kv_per_sequence == 124 * 12 * 278_528
    # preflight's need: one max-length sequence's KV of the 12 full layers + 36 states
    fit = model_fit(model, shape)
    assert fit.kv_per_sequence == 12 * 1024 * 32768 + 36 * 274_432


def test_hybrid_weights_count_the_mixers() -> None:
    """Qwen3-Next-80B-A3B: about 80 B parameters once the 36 Gated DeltaNet mixers replace
    attention (in_proj_qkvz 2,048 x 12,288, in_proj_ba 2,048 x 64, conv 8,192 x 4, out_proj
    4,096 x 2,048 ...: 33.7 M each); counting 48 attention layers instead gives 79.0 B."""
    model = model_config("qwen3-next-80b-a3b")
    assert 79.5e9 < model.params < 80.0e9


def test_plan_table_describes_the_hybrid_layout(tmp_path) -> None:
    """`pdctl plan -o wide` on Qwen3-Next with MTP: the KV row names the 13 full-attention
    layers (12 + the MTP layer), the 36 states of 282,624 B (2 speculative tokens) and the
    288-token block; the table used to read the sliding-window fields off any layout and
    crashed (AttributeError: window)."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: t\nphase: 0\n"
        "model: {name: Qwen/Qwen3-Next-80B-A3B-Instruct, maxModelLen: 32768}\n"
        "engine: {version: '0.23.0'}\nhosts:\n"
        "  - {name: g, address: 192.0.2.1, gpus: [0, 1, 2, 3], runtime: venv, venv: /opt/v}\n"
        "serve: {replicas: 1, tensorParallel: 4, speculative: {method: mtp, "
        "numSpeculativeTokens: 2}}\n"
    )
    code, out, err = run_cli(
        ["plan", str(spec), "--gpu", "H200", "-o", "wide"], env={"COLUMNS": "400", "NO_COLOR": "1"}
    )
    assert code == 0, err
    text = " ".join(out.split())
    assert "hybrid: 13 full-attention layers keep KV, 36 linear/Mamba layers" in text
    assert "(282,624 B, block 288 tokens)" in text
    assert "serve.speculative (mtp): counted: the 1 MTP layer(s)" in text


def test_nemotron_h_layers_are_one_block_each() -> None:
    """Nemotron-H-8B-Base-8K (tests/gpu/models/nemotron-h-8b): a layer is ONE block of its
    pattern letter, and its MLP is up + down (relu2, no gate: nemotron_h.py NemotronHMLP).
    Embedding + head 2 x 131,072 x 4,096 = 1,073,741,824; 24 MLP layers x 2 x 4,096 x 21,504 =
    4,227,858,432; 4 attention layers x 41,943,040 = 167,772,160; the Mamba-2 mixers
    2,631,017,472; norms 52 x 2 x 4,096 + 4,096 = 430,080: 8,100,819,968 (was 17.6e9 when
    every layer counted attention-free gated MLPs)."""
    raw = json.loads((Path(__file__).parents[1] / "gpu/models/nemotron-h-8b/config.json")
                     .read_text())
    m = model_config("nvidia/Nemotron-H-8B-Base-8K", raw)
    assert m.hybrid is not None and m.hybrid.params == 2_631_017_472
    assert (m.hybrid.full_layers, m.hybrid.linear_layers) == (4, 24)
    assert m.params == 8_100_819_968
