"""Closed-form memory: parameter counts, weights, KV per token (TP, PP, MLA, fp8), fit."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pdctl.capacity as capacity
import pdctl.capacity.models as models
import pdctl.capacity.tables as tables
from pdctl.capacity import (
    BUILTIN,
    Shape,
    alternatives,
    find_gpu,
    instance_memory,
    kv_bytes_per_token,
    model_config,
    model_fit,
    smallest_fit,
    weights_bytes_per_gpu,
)
from pdctl.capacity.gpus import GIB
from pdctl.errors import SpecError

# Published parameter counts (model cards), in billions.
PUBLISHED = {
    "llama-3.1-8b": 8.03, "llama-3.1-70b": 70.6, "qwen2.5-7b": 7.61, "qwen2.5-72b": 72.7,
    "qwen3-8b": 8.2, "qwen3-32b": 32.8, "qwen3-30b-a3b": 30.5, "qwen3-235b-a22b": 235,
    "mistral-7b": 7.25, "mixtral-8x7b": 46.7, "deepseek-v2-lite": 15.7, "deepseek-v2": 236,
    "deepseek-v3": 671, "gpt-oss-20b": 20.9, "gpt-oss-120b": 116.8,
}
ACTIVE = {
    "qwen3-30b-a3b": 3.3, "qwen3-235b-a22b": 22, "mixtral-8x7b": 12.9, "deepseek-v3": 37,
    "deepseek-v2": 21, "gpt-oss-120b": 5.1, "gpt-oss-20b": 3.6,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_the_model_cards(name: str) -> None:
    model = model_config(name)
    assert abs(model.params / 1e9 - PUBLISHED[name]) / PUBLISHED[name] < 0.02


@pytest.mark.parametrize("name", sorted(ACTIVE))
def test_active_parameters_of_moe_models(name: str) -> None:
    active = model_config(name).active_params / 1e9
    assert abs(active - ACTIVE[name]) / ACTIVE[name] < 0.15  # cards round; gpt-oss counts
    # embeddings differently


@pytest.mark.parametrize(
    ("name", "per_token"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", 2 * 32 * 8 * 128 * 2),  # 128 KiB
        ("meta-llama/Llama-3.1-70B-Instruct", 2 * 80 * 8 * 128 * 2),  # 320 KiB
        ("Qwen/Qwen2.5-7B-Instruct", 2 * 28 * 4 * 128 * 2),
        ("Qwen/Qwen3-8B", 2 * 36 * 8 * 128 * 2),
        ("mistralai/Mistral-7B-Instruct-v0.3", 2 * 32 * 8 * 128 * 2),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", 2 * 32 * 8 * 128 * 2),
        ("openai/gpt-oss-120b", 2 * 36 * 8 * 64 * 2),
        ("deepseek-ai/DeepSeek-V3", 61 * (512 + 64) * 2),  # MLA latent, one per layer
    ],
)
def test_kv_bytes_per_token_exact(name: str, per_token: int) -> None:
    assert kv_bytes_per_token(model_config(name)) == per_token


def test_kv_heads_split_across_tp_then_replicated() -> None:
    llama = model_config("llama-3.1-70b")  # 8 KV heads
    base = kv_bytes_per_token(llama)
    assert kv_bytes_per_token(llama, tp=2) == base // 2
    assert kv_bytes_per_token(llama, tp=8) == base // 8
    assert kv_bytes_per_token(llama, tp=16) == base // 8  # 1 head per rank, replicated
    qwen = model_config("qwen2.5-7b")  # 4 KV heads
    assert kv_bytes_per_token(qwen, tp=8) == kv_bytes_per_token(qwen, tp=4)


def test_mla_latent_is_not_split_by_tp() -> None:
    v3 = model_config("deepseek-v3")
    assert kv_bytes_per_token(v3, tp=8) == kv_bytes_per_token(v3) == 70272


def test_pipeline_stage_with_most_layers_sets_the_limit() -> None:
    lite = model_config("deepseek-v2-lite")  # 27 layers: stages of 14 and 13
    assert kv_bytes_per_token(lite, pp=2) == 14 * 576 * 2
    llama = model_config("llama-3.1-8b")
    assert weights_bytes_per_gpu(llama, pp=2) < weights_bytes_per_gpu(llama)
    assert weights_bytes_per_gpu(llama, pp=2) > weights_bytes_per_gpu(llama) / 2 * 0.9


def test_fp8_kv_halves_and_fp32_doubles() -> None:
    llama = model_config("llama-3.1-8b")
    assert kv_bytes_per_token(llama, kv_cache_dtype="fp8") * 2 == kv_bytes_per_token(llama)
    assert kv_bytes_per_token(llama, kv_cache_dtype="fp8_e5m2") * 2 == kv_bytes_per_token(llama)
    assert kv_bytes_per_token(llama, dtype="float32") == 2 * kv_bytes_per_token(llama)


def test_quantized_names_get_smaller_weights() -> None:
    bf16 = weights_bytes_per_gpu(model_config("Qwen/Qwen3-8B"))
    fp8 = weights_bytes_per_gpu(model_config("Qwen/Qwen3-8B-FP8"))
    awq = weights_bytes_per_gpu(model_config("Qwen/Qwen3-8B-AWQ"))
    assert 0.5 < fp8 / bf16 < 0.6  # embeddings stay bf16
    assert awq < fp8


def test_hf_config_dict_is_used_over_the_table() -> None:
    config = dict(BUILTIN["llama-3.1-8b"], num_hidden_layers=16)
    model = model_config("anything", config)
    assert kv_bytes_per_token(model) == 2 * 16 * 8 * 128 * 2
    nested = {"text_config": config, "architectures": ["X"]}
    assert kv_bytes_per_token(model_config("mm", nested)) == 2 * 16 * 8 * 128 * 2


def test_unknown_model_asks_for_config_or_params() -> None:
    with pytest.raises(SpecError) as err:
        model_config("acme/secret-13b")
    assert err.value.path == "model.name"
    assert "model.paramsBillion" in err.value.fix and "model.config" in err.value.fix


def test_params_billion_alone_borrows_the_nearest_shapes() -> None:
    model = model_config("acme/secret-13b", params_billion=13)
    assert model.shapes_from in ("qwen2.5-14b", "qwen3-14b")
    assert round(model.params / 1e9) == 13


def test_config_without_shapes_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="num_hidden_layers"):
        model_config("x", {"vocab_size": 10})


def test_llama_70b_smallest_fit_and_alternatives_on_h100() -> None:
    h100 = find_gpu("H100")
    model = model_config("llama-3.1-70b")
    shape = Shape(max_model_len=16384)
    assert not instance_memory(model, h100.usable_bytes, 0.92, shape).fits
    best = smallest_fit(model, h100.usable_bytes, shape)
    assert best is not None and (best.tp, best.pp) == (2, 1)
    alts = alternatives(model, h100.usable_bytes, Shape(tp=2, max_model_len=131072))
    assert any("fp8" in a.change for a in alts) or any("max-model-len" in a.change for a in alts)
    assert any(a.change.startswith("tensorParallel 4") for a in alts)


def test_deepseek_v3_needs_more_than_one_h100_node() -> None:
    best = smallest_fit(
        model_config("deepseek-v3"), find_gpu("H100").usable_bytes, Shape(max_model_len=32768)
    )
    assert best is not None and best.tp == 8 and best.pp >= 2
    h200 = smallest_fit(
        model_config("deepseek-v3"), find_gpu("H200").usable_bytes, Shape(max_model_len=32768)
    )
    assert h200 is not None and (h200.tp, h200.pp) == (8, 1)


def test_model_fit_for_preflight() -> None:
    fit = model_fit(model_config("llama-3.1-8b"), Shape(max_model_len=8192))
    assert fit.kv_per_sequence == 131072 * 8192 == GIB
    assert fit.need_bytes == fit.weights + fit.overhead + fit.kv_per_sequence


@given(
    util=st.floats(0.3, 0.95), delta=st.floats(0.001, 0.05), tp=st.sampled_from([1, 2, 4, 8]),
    length=st.integers(16, 131072),
)
def test_more_memory_never_means_fewer_tokens(
    util: float, delta: float, tp: int, length: int
) -> None:
    model, gpu = model_config("llama-3.1-70b"), find_gpu("H200")
    shape = Shape(tp=tp, max_model_len=length)
    low = instance_memory(model, gpu.usable_bytes, util, shape)
    high = instance_memory(model, gpu.usable_bytes, min(1.0, util + delta), shape)
    assert high.kv_tokens >= low.kv_tokens
    assert low.kv_tokens % low.block_size == 0
    assert low.fits == (low.kv_tokens >= length)


def test_capacity_models_import_no_other_capacity_module() -> None:
    """The model table is the bottom of capacity: params builds on it, never the reverse
    (models.model_config used to import params inside the function: an import circle). It
    reads its data file through capacity.tables, which imports no capacity module."""
    def imported(module: object) -> list[str]:
        tree = ast.parse(Path(str(getattr(module, "__file__", ""))).read_text())
        return [
            f"{node.module}.{alias.name}" if node.module == "pdctl.capacity" else node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names
        ]

    assert [m for m in imported(models) if m.startswith("pdctl.capacity")] == [
        "pdctl.capacity.tables"
    ]
    assert not [m for m in imported(tables) if m.startswith("pdctl.capacity")]


def test_capacity_gpu_type_is_not_called_gpu() -> None:
    """capacity's GPU model is GpuType: facts.Gpu is one GPU a host reported."""
    assert capacity.GpuType.__name__ == "GpuType"
    assert not hasattr(capacity, "Gpu")
