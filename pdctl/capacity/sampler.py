"""The sampler's share of vLLM's start-up profile, per engine version: `_dummy_sampler_run`
over max_num_seqs rows of vocab logits (docs/capacity.md cites the source lines)."""

from __future__ import annotations

from pdctl.capacity.engine import _key, patch_version, version
from pdctl.capacity.models import ModelConfig

# Bytes per vocab logit of the sampler's profiling run over max_num_seqs rows with top-k and
# top-p set (logits in bf16 and fp32, probabilities, a sorted copy with int64 indices, the
# cumulative sum, masks). Calibrated on logs that print the torch peak directly: vLLM 0.11
# on an H100 (1024 rows; Llama-3.1-8B 4.76 GiB, Qwen3 5.56 GiB, gpt-oss 7.38 GiB: 38.4-38.9
# bytes a logit, llm-d-benchmark config_explorer) and V0 (256 rows, 1.26-1.42 GiB: 39-41).
SAMPLER_BYTES_PER_LOGIT = 38.6
# vLLM 0.9 to 0.11.0 with FlashInfer installed ("Using FlashInfer for top-p & top-k sampling."
# in the log) profiled the sampler with FlashInfer's kernel alone: no sort, no int64 indices.
# 16 bytes a logit fitted on vLLM 0.10.1.1 on A100s (dennislee22/vLLM-benchmarking: Qwen2-7B,
# 256 rows, 0.55-0.61 GiB); the same cluster without FlashInfer matched 38.6, and vLLM 0.11.0
# on an H100 printed 2.12 GiB for Mistral-Small-3.2 (1024 x 131072 logits: 16.9 a logit).
FLASHINFER_BYTES_PER_LOGIT = 16.0
# From 0.9 (vllm#15777 adapted to FlashInfer 0.2.3; 0.8 refused FlashInfer >= 0.2.3) to 0.11.0;
# vllm#26859 (0.11.1) turned the FlashInfer sampler off by default (the llm-d logs above, from
# vllm/vllm-openai:latest of January 2026, show the sort's 38.6); `_dummy_sampler_run` runs
# the native path after FlashInfer's, which sorted until the Triton filter below.
FLASHINFER_ONLY = ((0, 9, 0), (0, 11, 1))


# vLLM 0.23.0 and 0.33.0 filter top-k/top-p with a Triton kernel in place for 8 rows or more
# (`apply_top_k_top_p` in vllm/v1/sample/ops/topk_topp_sampler.py: 0.23.0 l.334-349, 0.33.0
# l.501-521), not a sort. The profile's `_dummy_sampler_run` (gpu_model_runner.py, 0.23.0
# l.5974-6047) keeps the bf16 logits of `compute_logits` (2 bytes a logit) while the sampler
# makes an fp32 copy (`Sampler.forward`, 4), its softmax (4) and the exponential noise of
# `random_sample` (4, divided into the probabilities in place): 14 bytes a logit at the peak.
# The kernel's per-program buffer (min(SMs, rows) x vocab x 4 bytes, cached) comes on top.
# Before 0.23 the logs show the sort (38.6); the release that changed it was not located.
TRITON_TOPK_FROM = (0, 23)
TRITON_TOPK_BYTES_PER_LOGIT = 14
TRITON_TOPK_MIN_ROWS = 8
# Streaming multiprocessors a GPU model has (the Triton kernel runs one program per SM)
_SMS = (
    ("h100pcie", 114), ("h100", 132), ("h200", 132), ("h20", 78), ("b200", 148), ("a100", 108),
    ("l40s", 142), ("l4", 58), ("a10g", 80), ("rtx4090", 128), ("rtx3090", 82), ("rtx4060", 24),
)


def sm_count(gpu_name: str) -> int:
    """SMs of the GPU model (132, an H100's, when unknown)."""
    key = _key(gpu_name)
    return next((n for prefix, n in _SMS if key.startswith(prefix)), 132)


def triton_buffer_bytes(model: ModelConfig, seqs: int, gpu_name: str) -> int:
    """The Triton top-k/top-p kernel's cached buffer (`apply_top_k_top_p_triton`,
    vllm/v1/sample/ops/topk_topp_triton.py, 0.23.0 l.906-917): min(next power of two of
    min(SMs, rows), SMs) rows of vocab fp32 values."""
    sms = sm_count(gpu_name)
    programs = min(sms, seqs)
    rows = min(1 << max(0, programs - 1).bit_length(), sms)
    return rows * model.vocab * 4


def flashinfer_only(engine: str | None, installed: bool | None = None) -> bool:
    """Whether this engine's profile runs the sampler through FlashInfer alone.

    `installed` None: the vllm/vllm-openai image's, which pdctl deploys (FlashInfer in it).
    A plain `pip install vllm` of 0.9-0.11.0 had no FlashInfer (an optional extra from
    vllm#21959 until vllm#26443 made it a dependency in 0.11.1): pass False."""
    low, high = FLASHINFER_ONLY
    return low <= patch_version(engine) < high and installed is not False


# vLLM 0.23.0 runs Llama, Mistral and Qwen3 dense, unquantised models on its V2 model runner
# (vllm/config/vllm.py l.69-75 DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, l.519-558
# `use_v2_model_runner`: not MoE, not quantised). Its profile (vllm/v1/worker/gpu/
# model_runner.py l.609-658) samples a dummy batch without top-k/top-p ("the sampler may skip
# top_k, top_p, and logprobs"): the bf16 logits (2 bytes a logit) and the fp32 copy of
# `apply_sampling_params` (4; gumbel sampling allocates per block, not per logit), 6 bytes a
# logit, no Triton buffer; and its `profile_cudagraph_memory` returns 0 (l.660-662): the
# graphs come out of the headroom above util, as before 0.21.
# 0.33.0 runs every model on V2 (`use_v2_model_runner`, vllm/config/vllm.py l.731-767) and
# its `_dummy_sampler_run` (v1/worker/gpu/model_runner.py l.993-1014) adds a pass with
# warm-up parameters (top-k, top-p, penalties, logprobs): the bf16 logits (2) and the fp32
# processed copy (4) at the peak, top-k/top-p by the Triton kernel in place, the logprobs by
# top-k and gather (small). Its non-KV sum, `total_consumed` (utils/mem_utils.py l.309-321),
# also takes the penalties' persistent `output_bin_counts` (max_num_seqs x vocab int32,
# v1/worker/gpu/sample/penalties.py l.48-50), which 0.23.0's peak-increase sum leaves out:
# 10 bytes a logit, plus the Triton buffer. From the source only: no 0.33.0 log checks it.
V2_RUNNER_VERSION = (0, 23)
# With speculative decoding (any method) the V1 runner's `_dummy_sampler_run` (0.23.0
# gpu_model_runner.py l.6048-6079) then runs the rejection sampler over one dummy draft token
# per request: new bf16 logits of 2 x max_num_seqs rows (4 bytes a request's vocab logit),
# `RejectionSampler.forward` (v1/sample/rejection_sampler.py l.121-181) holding the bonus rows
# (2), the bonus sampler's raw fp32 logits kept for logprobs (4), the target rows in fp32 (4)
# and their clone (4), then `rejection_sample`'s softmax (4) and `sample_recovered_tokens`'
# exponential noise and its reciprocal (4 + 4, l.682-694): 30 bytes at its peak where the
# plain sampler run peaked at 14, so 16 more. Draft probabilities are only made for
# draft_sample_method "probabilistic" (the default is "greedy").
REJECTION_EXTRA_BYTES_PER_LOGIT = 16
V2_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM")
V2_BYTES_PER_LOGIT = 6
V2_EVERY_MODEL_FROM = (0, 24)  # 0.33.0's rule; the release between that changed it not located
V2_WARMUP_BYTES_PER_LOGIT = 10


def v2_runner(model: ModelConfig, engine: str | None) -> bool:
    """Whether vLLM 0.23's V2 model runner serves the model (see V2_ARCHITECTURES)."""
    return (
        version(engine) == V2_RUNNER_VERSION
        and model.architecture in V2_ARCHITECTURES
        and not model.is_moe
        and model.weight_bits >= 16
        and not model.vision_params
    )


def triton_topk(engine: str | None, seqs: int) -> bool:
    """Whether the profile's sampler filters with the Triton kernel (no sort)."""
    return version(engine) >= TRITON_TOPK_FROM and seqs >= TRITON_TOPK_MIN_ROWS


def sampler_bytes(
    model: ModelConfig, seqs: int, engine: str | None, flashinfer: bool | None = None,
    gpu_name: str = "", spec_decode: bool = False,
) -> int:
    """The profile's sampler run: max_num_seqs rows of vocab logits (`spec_decode`: with
    the rejection sampler's run after it, derived for 0.23's V1 runner only)."""
    if v2_runner(model, engine):
        return int(seqs * model.vocab * V2_BYTES_PER_LOGIT)
    warmup = version(engine) >= V2_EVERY_MODEL_FROM
    if warmup or triton_topk(engine, seqs):
        per_logit = V2_WARMUP_BYTES_PER_LOGIT if warmup else TRITON_TOPK_BYTES_PER_LOGIT
        if spec_decode and version(engine) == V2_RUNNER_VERSION:
            per_logit += REJECTION_EXTRA_BYTES_PER_LOGIT
        return int(seqs * model.vocab * per_logit) + triton_buffer_bytes(model, seqs, gpu_name)
    flash = flashinfer_only(engine, flashinfer)
    sort_per_logit = FLASHINFER_BYTES_PER_LOGIT if flash else SAMPLER_BYTES_PER_LOGIT
    return int(seqs * model.vocab * sort_per_logit)
