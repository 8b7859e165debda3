"""vLLM's "GPU KV cache size" against the tokens the cache stores at once (issue 35 item 5).

vLLM 0.23.0 prints `int(max_concurrency x max_model_len)` (`_report_kv_cache_config`,
vllm/v1/core/kv_cache_utils.py l.1720-1749), concurrency being the pool's blocks over the
blocks one max-length request takes (`get_max_concurrency_for_kv_cache_config`, l.899-917). A
sliding-window layer holds at most `cdiv(min(window - 1 + max_num_batched_tokens,
max_model_len), block) + 1` blocks a request (`SlidingWindowSpec.max_admission_blocks_per_request`,
vllm/v1/kv_cache_interface.py l.488-508), so with max_model_len past the window vLLM's count is
of context tokens, more than the pool stores. The expected figures below are what vLLM
0.23.0's own functions (`get_kv_cache_configs`, `get_max_concurrency_for_kv_cache_config`, run
on CPU from the 0.23.0 wheel with the layers' `SlidingWindowSpec`/`FullAttentionSpec`) gave for
the same available memory; the issue's "vLLM prints 933,568 / 667,648" are the pool's
`num_blocks x block_size`, a figure vLLM 0.23.0 does not print.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdctl.capacity import Shape, find_gpu, instance_memory, model_config
from pdctl.capacity.gpus import GIB
from pdctl.capacity.memory import KvLayout
from tests.helpers import cli

MODELS = Path(__file__).resolve().parents[1] / "gpu" / "models"


def _model(name: str):
    config = json.loads((MODELS / name / "config.json").read_text())
    return model_config(name, config)


# Mistral-7B: 32 sliding layers (window 4096), 8 KV heads x 128, bf16: 4 KiB a layer;
# Gemma-2-9B: 21 full + 21 sliding layers (window 4096), 8 KV heads x 256: 8 KiB a layer
MISTRAL = KvLayout(layer_bytes=4096, full_layers=0, sliding_layers=32, window=4096, in_flight=8192)
GEMMA = KvLayout(layer_bytes=8192, full_layers=21, sliding_layers=21, window=4096, in_flight=8192)
# (layout, available GiB, max_model_len) -> vLLM 0.23.0's num_blocks, printed tokens, slots
VLLM_023 = [
    pytest.param(MISTRAL, 114.22, 32768, 58_480, 2_491_902, 935_680, id="mistral-7b-32k"),
    pytest.param(
        MISTRAL, 69.23, 4096, 35_445, 564_913, 567_120,
        id="mistral-7b-4k (the H200 start-up's memory; its log: 564,881)",
    ),
    pytest.param(GEMMA, 107.47, 8192, 41_923, 335_056, 335_384, id="gemma-2-9b-8k"),
    pytest.param(
        GEMMA, 97.19, 4096, 37_913, 302_712, 303_304,
        id="gemma-2-9b-4k (the H200 start-up's memory; its log: 302,696)",
    ),
]


@pytest.mark.parametrize(("layout", "available", "length", "blocks", "printed", "slots"), VLLM_023)
def test_layout_counts_as_vllm_0_23_does(layout, available, length, blocks, printed, slots):
    available = int(available * GIB)
    assert layout.blocks(available) == blocks
    assert layout.tokens(available, length) == printed  # "GPU KV cache size: N tokens"
    assert layout.slots(available) == slots  # not printed by vLLM: stored at once


def _h200(name: str, length: int, util: float = 0.92):
    shape = Shape(gpu="H200", engine="0.23.0", max_model_len=length)
    return instance_memory(_model(name), find_gpu("H200").usable_bytes, util, shape)


def test_mistral_at_32k_counts_context_tokens_not_stored_ones():
    """The issue's case (plan's defaults: max_model_len 32768, util 0.92): vLLM's count is
    2.66x what the pool stores, because a 32k sequence keeps 12,287 tokens + 1 block."""
    mem = _h200("mistral-7b", 32768)
    assert mem.kv_tokens == int(mem.layout.blocks(mem.kv_available) / 769 * 32768)
    assert mem.kv_token_slots == mem.layout.blocks(mem.kv_available) * 16
    assert abs(mem.kv_tokens / mem.kv_token_slots - 32768 / 769 / 16) < 1e-4
    assert mem.concurrency == pytest.approx(mem.kv_tokens / 32768)
    # a token within the window takes every layer: 32 x 4 KiB
    assert mem.kv_per_token_all_layers == 131072
    # sequences of 1,152 tokens (shorter than the window): stored whole, 73 blocks each
    assert mem.kv_sequences(1152) == mem.layout.blocks(mem.kv_available) // 73
    assert mem.kv_sequences(1152) * 1152 <= mem.kv_token_slots < mem.kv_tokens // 2


def test_gemma_2_count_and_slots_agree_within_a_block_a_request():
    mem = _h200("gemma-2-9b", 8192)
    blocks = mem.layout.blocks(mem.kv_available)
    assert mem.kv_tokens == int(blocks / (512 + 513) * 8192)
    assert mem.kv_token_slots == blocks * 16 // 2
    assert mem.kv_per_token_all_layers == 42 * 8192


def test_dense_count_is_the_stored_tokens():
    mem = _h200("qwen3-8b", 4096, 0.5)
    assert mem.layout is None
    assert mem.kv_token_slots == mem.kv_tokens
    assert mem.kv_sequences(1000) == mem.kv_tokens // 1000
    assert mem.kv_per_token_all_layers == mem.kv_per_token


def test_the_decode_batch_uses_sequences_the_cache_stores(tmp_path, capsys):
    """`plan`'s decode batch for Mistral at 32k: at most the sequences of the workload's
    context that the cache stores, not vLLM's count / context (2,163 at 1,152 tokens)."""

    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: kv\nphase: 0\n"
        f"model: {{name: mistralai/Mistral-7B-v0.1, maxModelLen: 32768, "
        f"config: {MODELS / 'mistral-7b' / 'config.json'}}}\n"
        "engine: {version: 0.23.0}\nhardware: {gpu: H200}\n"
        "hosts: [{name: h, address: 127.0.0.1, gpus: [0], runtime: venv, venv: /opt/v}]\n"
        "serve: {gpuMemoryUtilization: 0.92, maxNumSeqs: 4096}\n"
    )
    out, err = cli(["plan", str(spec), "-o", "json"])
    role = json.loads(out)["roles"][0]
    context = role["decode"]["context"]
    assert role["decode"]["batch"] * context <= role["kvTokenSlots"], (role["decode"], context)
    assert role["kvTokens"] > 2.6 * role["kvTokenSlots"]
