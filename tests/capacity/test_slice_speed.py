"""Phase 3 slices, roofline speed against our H200 measurement, packing advice."""

from __future__ import annotations

import math

import pytest

from pdctl.capacity import Shape, decode_slice, find_gpu, model_config, slice_util
from pdctl.capacity.advice import packing_advice
from pdctl.capacity.models import ModelConfig
from pdctl.capacity.roofline import decode_step, prefill_tokens_per_s
from pdctl.capacity.slice import slice_for
from pdctl.hami import CUDA_GRAPH_MIB, HAMI_CORE_MIB, MAX_UTILIZATION

H200 = find_gpu("H200")


def _render_util(mib: int, eager: bool = False) -> float:
    # pdctl.hami: (slice - HAMi-core - CUDA graphs unless eager) / slice, floored to
    # 0.01 and capped (the constants live there; this restates the formula independently)
    head = HAMI_CORE_MIB + (0 if eager else CUDA_GRAPH_MIB)
    return min(MAX_UTILIZATION, math.floor((mib - head) / mib * 100) / 100)


def test_slice_util_is_renders_formula() -> None:
    assert slice_util(71885) == _render_util(71885)
    assert slice_util(16384, enforce_eager=True) == _render_util(16384, eager=True)
    assert slice_util(16384) == _render_util(16384)
    assert slice_util(1024) == 0.0  # too small: less than half left to vLLM


def test_slice_for_is_the_smallest_that_holds_one_sequence() -> None:
    model = model_config("qwen3-8b")
    shape = Shape(max_model_len=8192)
    mib = slice_for(model, shape)
    assert mib % 256 == 0
    assert decode_slice(model, 143771, shape, per_gpu=1, mib=mib).fits
    assert not decode_slice(model, 143771, shape, per_gpu=1, mib=mib - 256).fits


def test_two_llama_8b_slices_on_an_h200() -> None:
    sl = decode_slice(model_config("llama-3.1-8b"), H200.memory_mib, Shape(max_model_len=8192))
    assert sl.per_gpu == 2 and sl.slice_mib == 143771 // 2
    assert sl.gpu_memory_utilization == _render_util(143771 // 2)
    assert sl.fits and sl.kv_tokens > 300_000
    assert sl.max_per_gpu >= 6  # ~21 GiB minimal slices
    explicit = decode_slice(model_config("llama-3.1-8b"), H200.memory_mib,
                            Shape(max_model_len=8192), per_gpu=3, mib=40000)
    assert explicit.slice_mib == 40000 and explicit.fits
    too_many = decode_slice(model_config("llama-3.1-8b"), H200.memory_mib,
                            Shape(max_model_len=8192), per_gpu=4, mib=40000)
    assert not too_many.fits  # 4 x 40000 MiB > 143771 MiB


def test_70b_does_not_fit_a_half_h200_slice() -> None:
    sl = decode_slice(model_config("llama-3.1-70b"), H200.memory_mib, Shape(max_model_len=8192),
                      per_gpu=2)
    assert not sl.fits and sl.min_slice_mib > sl.slice_mib


# fixtures/gpu/h200x2/decode_share.txt (copied numbers): one process on one H200, 32 layers of
# bf16 4096x14336 + 14336x4096 (7.516 GB), step time in ms at batch B.
MEASURED_STEP_MS = {1: 2.0339, 16: 2.0255, 64: 2.2182, 128: 2.4490, 256: 3.7178}


@pytest.mark.parametrize("batch", sorted(MEASURED_STEP_MS))
def test_roofline_matches_the_h200_decode_measurement(batch: int) -> None:
    params = 32 * 2 * 4096 * 14336
    model = ModelConfig(name="decode-share", layers=32, hidden=4096, heads=32, kv_heads=8,
                        head_dim=128, vocab=0, intermediate=14336, max_position=4096,
                        params=params, active_params=params)
    est = decode_step(model, H200, Shape(), batch, 0)
    assert est.step_bound_s * 1000 <= MEASURED_STEP_MS[batch]  # a lower bound is a bound
    assert abs(est.tpot_ms - MEASURED_STEP_MS[batch]) / MEASURED_STEP_MS[batch] < 0.2


def test_decode_reads_kv_and_moe_reads_few_experts() -> None:
    llama = model_config("llama-3.1-8b")
    short = decode_step(llama, H200, Shape(), 64, 128)
    long = decode_step(llama, H200, Shape(), 64, 32768)
    assert long.step_bound_s > 2 * short.step_bound_s  # KV read dominates at long context
    moe = model_config("qwen3-30b-a3b")
    assert decode_step(moe, H200, Shape(), 1, 0).bytes_read < 0.2 * decode_step(
        moe, H200, Shape(), 512, 0).bytes_read
    assert prefill_tokens_per_s(llama, H200, Shape(tp=2), 1024) == pytest.approx(
        2 * prefill_tokens_per_s(llama, H200, Shape(), 1024))


def test_advice_busy_says_raise_max_num_seqs() -> None:
    advice = packing_advice(kv_batch=600, target_batch=200, demand=400, per_gpu=2)
    assert advice.case == "busy" and not advice.pack
    assert any("max-num-seqs" in line for line in advice.lines)
    assert any("0.94x" in line and "0.58x" in line for line in advice.lines)


def test_advice_low_traffic_packs() -> None:
    advice = packing_advice(kv_batch=600, target_batch=200, demand=5)
    assert advice.case == "low-traffic" and advice.pack


def test_advice_kv_limited_does_not_pack_copies() -> None:
    advice = packing_advice(kv_batch=40, target_batch=200, demand=None)
    assert advice.case == "kv-limited" and not advice.pack
    assert any("fp8" in line for line in advice.lines)


def test_advice_without_traffic() -> None:
    advice = packing_advice(kv_batch=600, target_batch=200, demand=None, per_gpu=2)
    assert advice.case == "unknown-traffic" and not advice.pack
