"""Roofline speed estimates: decode is memory-bandwidth bound, prefill is compute bound.

Lower bounds use the datasheet peaks. "Expected" figures divide by the efficiencies we
measured on an H200 (fixtures/gpu/h200x2/decode_share.txt): a decode-like pass over 7.5 GB of
bf16 weights reached 3.7 TB/s of the 4.8 TB/s peak (77%) at batch 1-16, and about half of the
peak FLOP/s at batch 256. Communication between TP ranks is ignored.

Co-located instances (phase 3: HAMi slices, `decode.share.perGpu` > 1) time-slice one GPU: N
real vLLM 0.23.0 engines in HAMi-core slices at batch 64 each gave 0.94x the tokens/s of ONE
engine at batch 64 on the whole GPU (tests/fixtures/gpu/vllm023-h200/README.md, N = 2, 3, 4 on
an H200; a stand-in engine gave 0.91x, tests/fixtures/gpu/hami-h200), so each runs at 0.94 / N
of its speed alone. Beyond 4 instances the same factor is assumed, not measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdctl.capacity.fit import Shape
from pdctl.capacity.gpus import GpuType
from pdctl.capacity.memory import dtype_bytes, kv_bytes_per_token, weights_bytes_per_gpu
from pdctl.capacity.models import ModelConfig

BANDWIDTH_EFFICIENCY = 0.77  # measured: 3.70 of 4.8 TB/s on one H200 (decode_share, B=1..16)
COMPUTE_EFFICIENCY = 0.5  # measured: B=256 step 3.72 ms vs 1.95 ms of peak-FLOP time
PREFILL_MFU = 0.5  # share of peak FLOP/s a prefill reaches (typical for large prompts)
# N co-located vLLM engines at batch B vs ONE at B, tokens/s per GPU: 7,595 / 8,048 (N = 2),
# 7,543 (3), 7,546 (4) at B = 64 (tests/fixtures/gpu/vllm023-h200: phase0, phase3)
TIME_SLICE_EFFICIENCY = 0.94
TIME_SLICE_MEASURED_UP_TO = 4  # instances per GPU the factor was measured for


def time_slice_basis(per_gpu: int) -> str:
    """'measured', or 'assumed' where the time-slicing factor was not measured."""
    return "measured" if per_gpu <= TIME_SLICE_MEASURED_UP_TO else "assumed"


def weights_read_per_step(model: ModelConfig, shape: Shape, batch: int) -> float:
    """Weight bytes one decode step reads on one GPU: all but the input embedding (one row per
    token). For MoE only the experts the batch routes to are read: per layer
    E x (1 - (1 - k/E)^B) distinct experts in expectation."""
    total = float(weights_bytes_per_gpu(model, shape.tp, shape.pp, shape.dtype, shape.ep))
    if model.embed_params > model.vocab * model.hidden:  # untied: input embedding not read
        total -= model.vocab * model.hidden * dtype_bytes(shape.dtype, model) / shape.tp
    if not model.is_moe or model.expert_params <= 0:
        return float(total)
    share_expert = model.expert_params / model.params
    expert_bytes = total * share_expert  # close enough: experts dominate MoE weights
    k, e = model.experts_per_token, model.experts
    touched = 1.0 - (1.0 - k / e) ** max(1, batch)
    return total - expert_bytes + expert_bytes * touched


@dataclass(frozen=True)
class DecodeEstimate:
    """One decode step of `batch` sequences with `context` tokens each, on one instance."""

    batch: int
    context: int
    bytes_read: float  # per GPU: weights read + KV read
    flops: float  # per GPU
    step_bound_s: float  # lower bound: max(bytes / peak bandwidth, flops / peak FLOP/s)
    step_expected_s: float  # with the measured efficiencies (and time-slicing, below)
    per_gpu: int = 1  # instances time-slicing one GPU (HAMi slices): each gets 0.94 / N of it

    @property
    def tokens_per_s_bound(self) -> float:
        return self.batch / self.step_bound_s

    @property
    def tokens_per_s(self) -> float:
        """Expected decode tokens/s of the instance (all sequences together)."""
        return self.batch / self.step_expected_s

    @property
    def tpot_ms(self) -> float:
        """Expected time per output token of each sequence, in ms."""
        return self.step_expected_s * 1000


def decode_step(
    model: ModelConfig, gpu: GpuType, shape: Shape, batch: int, context: int, per_gpu: int = 1
) -> DecodeEstimate:
    """Decode step time: (weights per GPU + KV read) / HBM bandwidth, or FLOPs / peak.

    `per_gpu` instances time-slicing the GPU (HAMi slices): each step takes per_gpu / 0.94
    times as long (expected; the bound assumes perfect slicing, per_gpu times)."""
    kv = kv_bytes_per_token(model, shape.tp, shape.pp, shape.kv_cache_dtype, shape.dtype)
    bytes_read = weights_read_per_step(model, shape, batch) + batch * context * kv
    # 2 FLOPs per active parameter per token, plus attention: 4 x layers x heads x head_dim x ctx
    attn = 4 * model.layers * model.heads * model.head_dim * context
    flops = batch * (2 * model.active_params + attn) / (shape.tp * shape.pp)
    bw = gpu.bandwidth_gbs * 1e9
    peak = gpu.bf16_tflops * 1e12
    bound = max(bytes_read / bw, flops / peak)
    expected = max(bytes_read / (bw * BANDWIDTH_EFFICIENCY), flops / (peak * COMPUTE_EFFICIENCY))
    if per_gpu > 1:
        bound *= per_gpu
        expected *= per_gpu / TIME_SLICE_EFFICIENCY
    return DecodeEstimate(batch, context, bytes_read, flops, bound, expected, max(1, per_gpu))


def prefill_tokens_per_s(model: ModelConfig, gpu: GpuType, shape: Shape, prompt: int) -> float:
    """Prefill throughput of one instance (all its GPUs) from FLOPs at PREFILL_MFU.

    FLOPs per prompt token = 2 x active params + attention 2 x layers x heads x head_dim x
    prompt (causal: half of 4 x ... x prompt)."""
    per_token = 2 * model.active_params + 2 * model.layers * model.heads * model.head_dim * prompt
    gpus = shape.tp * shape.pp * shape.dp  # every DP rank prefills its own requests
    return gpu.bf16_tflops * 1e12 * PREFILL_MFU * gpus / per_token


def ridge_batch(model: ModelConfig, gpu: GpuType, shape: Shape) -> int:
    """The batch at which a decode step stops being bandwidth bound (weights only): about
    ridge x bytes per weight / 2, since each weight read serves `batch` multiply-adds."""
    width = dtype_bytes(shape.dtype, model) if model.weight_bits >= 16 else model.weight_bits / 8
    return max(1, int(gpu.ridge * width / 2))


def best_batch(
    model: ModelConfig,
    gpu: GpuType,
    shape: Shape,
    context: int,
    max_batch: int,
    tpot_ms: float | None = None,
    per_gpu: int = 1,
) -> int:
    """The largest batch (<= max_batch) whose expected step time meets `tpot_ms` (if given),
    with `per_gpu` instances time-slicing the GPU."""
    if tpot_ms is None:
        return max(1, max_batch)
    lo, hi = 1, max(1, max_batch)
    if decode_step(model, gpu, shape, 1, context, per_gpu).tpot_ms > tpot_ms:
        return 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if decode_step(model, gpu, shape, mid, context, per_gpu).tpot_ms <= tpot_ms:
            lo = mid
        else:
            hi = mid - 1
    return lo
