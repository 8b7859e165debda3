"""Which kernels vLLM 0.23.0 runs a quantised checkpoint with on a GPU, and what that changes
in memory: gpt-oss's mxfp4 experts off Hopper (Marlin), fp8 below sm89 (Marlin W8A16), and
the GPUs vLLM refuses. docs/capacity.md ("Quantised checkpoints off Hopper") links each rule
to the vLLM 0.23.0 source; the arithmetic is pinned by tests/capacity/test_mxfp4_marlin.py.

The compute capability comes from pdctl/data/gpus.yaml (`compute_capability`, vLLM's
`DeviceCapability.to_int()`: 80 for an A100, 89 for an L40S). A GPU pdctl cannot name (a bare
`--gpu-memory-gib`) keeps the Hopper figures pdctl has always used.
"""

from __future__ import annotations

import math

from pdctl.capacity.models import ModelConfig

# vLLM 0.23.0 quantization/mxfp4.py l.55-57 `Mxfp4Config.get_min_capability`: 80, checked at
# start-up by config/vllm.py l.617-626 ("The quantization method ... is not supported for the
# current GPU. Minimum capability: 80. Current capability: 75.")
MXFP4_MIN_CAPABILITY = 80
# fp8.py l.146-148 `Fp8Config.get_min_capability`: 75
FP8_MIN_CAPABILITY = 75
# Below this, fp8 weights run through Marlin W8A16 (kernels/linear/scaled_mm/marlin.py
# l.35-56: `compute_capability >= 89` refuses Marlin unless VLLM_TEST_FORCE_FP8_MARLIN)
FP8_NATIVE_CAPABILITY = 89
# The OpenAI Triton mxfp4 MoE kernels run on (9, 0) <= capability < (11, 0)
# (fused_moe/experts/gpt_oss_triton_kernels_moe.py l.37-49): Hopper, pdctl's measured case.
TRITON_MXFP4_CAPABILITY = 90

# Marlin's alignment (fused_moe/oracle/mxfp4.py l.664-669
# `mxfp4_round_up_hidden_size_and_intermediate_size`): each rank's expert width to 128, the
# hidden size to 256 (on CUDA); the hidden states are padded to it before the experts
# (fused_moe/runner/moe_runner.py l.454-486 `_maybe_pad_hidden_states`).
MARLIN_WIDTH_ALIGN = 128
MARLIN_HIDDEN_ALIGN = 256
# The Hopper (Triton) figure pdctl has used since its H100 logs: the width to 256.
HOPPER_WIDTH_ALIGN = 256

MARLIN_FP8_SCALE_BITS = 16  # Marlin's fp8 group scales: one bf16 per block_k inputs


def round_up(value: int, align: int) -> int:
    return math.ceil(value / align) * align


def capability(gpu_name: str) -> int | None:
    """The GPU's compute capability as vLLM writes it (80, 89, 90), None when pdctl does not
    know the GPU ('' or a bare memory size)."""
    from pdctl.capacity.gpus import GPUS, find_gpu
    from pdctl.errors import SpecError

    if not gpu_name:
        return None
    if gpu_name in GPUS:
        return GPUS[gpu_name].compute_capability
    try:
        return find_gpu(gpu_name).compute_capability
    except SpecError:
        return None


def mxfp4_backend(gpu_name: str) -> str | None:
    """The mxfp4 MoE backend vLLM 0.23.0 picks for gpt-oss on this GPU: 'triton' (Hopper, and
    an unknown GPU: pdctl's figures so far), 'marlin' (sm80-sm89: A100, A10G, RTX 30xx, L40S,
    L4, RTX 40xx), None where vLLM refuses (below sm80).

    The priority list (fused_moe/oracle/mxfp4.py l.270-289): FlashInfer TRT-LLM (sm100
    family only, experts/trtllm_mxfp4_moe.py l.84-87), AITER (ROCm), OpenAI Triton (sm90 to
    sm10x), FlashInfer CUTLASS (sm90, sm100, sm120, experts/flashinfer_cutlass_moe.py
    l.131-143), then Marlin (sm75 and up, experts/marlin_moe.py l.590-593); the first whose
    `is_supported_config` passes wins (l.535-549)."""
    cc = capability(gpu_name)
    if cc is None or cc >= TRITON_MXFP4_CAPABILITY:
        return "triton"
    if cc < MXFP4_MIN_CAPABILITY:
        return None
    return "marlin"


def mxfp4_marlin(model: ModelConfig, gpu_name: str) -> bool:
    """gpt-oss's mxfp4 experts run (and are laid out) for Marlin on this GPU."""
    return model.quantization == "mxfp4" and mxfp4_backend(gpu_name) == "marlin"


def fp8_marlin(model: ModelConfig, gpu_name: str) -> bool:
    """An fp8 checkpoint runs through Marlin W8A16 on this GPU (sm75 to sm86)."""
    cc = capability(gpu_name)
    fp8 = model.quantization is not None and "fp8" in model.quantization
    return fp8 and cc is not None and FP8_MIN_CAPABILITY <= cc < FP8_NATIVE_CAPABILITY


def expert_dims(model: ModelConfig, tp: int, ep: int, gpu_name: str) -> tuple[int, int]:
    """(expert width on one rank, hidden size) as vLLM allocates an mxfp4 expert on this GPU:
    Marlin rounds the width up to 128 and the hidden size to 256 (gpt-oss 2880 -> 2944 and
    3072 at TP 1); on Hopper pdctl keeps its measured width rounded to 256 and the hidden size
    as it is. With expert parallelism a rank holds whole experts."""
    width = model.moe_intermediate // (1 if ep and ep != tp else tp)
    if mxfp4_marlin(model, gpu_name):
        return round_up(width, MARLIN_WIDTH_ALIGN), round_up(model.hidden, MARLIN_HIDDEN_ALIGN)
    return round_up(width, HOPPER_WIDTH_ALIGN), model.hidden


def expert_scale(model: ModelConfig, tp: int, ep: int, gpu_name: str) -> float:
    """Expert parameters as allocated over those in the checkpoint (padding), 1.0 unless the
    experts are mxfp4. gpt-oss at TP 1: 3072/2880 on Hopper, 2944 x 3072 / 2880^2 on Marlin."""
    if model.quantization != "mxfp4" or not model.moe_intermediate:
        return 1.0
    if not mxfp4_marlin(model, gpu_name):  # Hopper: the measured per-rank width only
        width = model.moe_intermediate / tp
        return math.ceil(width / HOPPER_WIDTH_ALIGN) * HOPPER_WIDTH_ALIGN / width
    width, hidden = expert_dims(model, tp, ep, gpu_name)
    raw = model.moe_intermediate / (1 if ep and ep != tp else tp)
    return width * hidden / (raw * model.hidden)


def expert_bias_bytes(model: ModelConfig, tp: int, ep: int, gpu_name: str) -> int:
    """One layer's expert biases on one rank as Marlin keeps them: gate/up (E, 2N) and down
    (E, K) at the activation dtype, bf16 (mxfp4.py l.246-267 `create_weights`, then
    marlin_utils_fp4.py l.620-631 `permute_bias`, `bias.to(param_dtype)`), over the padded
    width N and hidden size K; down's bias is not split by TP. pdctl's parameter count has
    no expert biases; on Hopper they stay inside its measured figure (0 here)."""
    if not mxfp4_marlin(model, gpu_name) or not model.experts:
        return 0
    width, hidden = expert_dims(model, tp, ep, gpu_name)
    experts = model.experts // ep if ep and ep != tp else model.experts
    return experts * (2 * width + hidden) * 2


def linear_bits(model: ModelConfig, bits: float, gpu_name: str) -> float:
    """Bits a quantised weight takes as loaded on this GPU. fp8 block-quantised weights on
    Marlin keep one bf16 scale per block_k inputs of every output column (the 128 x 128 fp32
    block scales repeated over block_n, marlin_utils_fp8.py l.175-183 and l.296-303): +16/128
    = 0.125 bit. Per-tensor or per-channel fp8 scales become one bf16 per output column
    (16/K bits, under 0.01 bit: left out)."""
    if fp8_marlin(model, gpu_name) and model.weight_block is not None and bits < 16:
        return bits + MARLIN_FP8_SCALE_BITS / model.weight_block[1]
    return bits


def refusal(model: ModelConfig, gpu_name: str) -> str:
    """'' or why vLLM 0.23.0 refuses this checkpoint on this GPU (its own words)."""
    cc = capability(gpu_name)
    if cc is None or model.quantization is None:
        return ""
    method, need = "", 0
    if model.quantization == "mxfp4" and cc < MXFP4_MIN_CAPABILITY:
        method, need = "gpt_oss_mxfp4", MXFP4_MIN_CAPABILITY
    elif "fp8" in model.quantization and cc < FP8_MIN_CAPABILITY:
        method, need = "fp8", FP8_MIN_CAPABILITY
    if not method:
        return ""
    return (
        f"vLLM refuses {model.name}'s {model.quantization} weights on {gpu_name} "
        f"(compute capability {cc / 10:.1f}): 'The quantization method {method} is not "
        f"supported for the current GPU. Minimum capability: {need}. Current capability: "
        f"{cc}.'; use a GPU of compute capability {need / 10:.1f} or later"
    )
