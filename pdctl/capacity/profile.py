"""What vLLM's start-up profile takes before the KV cache, term by term, per engine version.

vLLM 0.33.0 (`vllm/v1/worker/gpu_worker.py` `determine_available_memory`):

    requested = ceil(total x gpu_memory_utilization)            (v1/worker/utils.py)
    non_kv    = weights + non-torch growth + (torch peak - torch allocated)
                of one profile run                             (utils/mem_utils.py)
    kv        = requested - non_kv - CUDA-graph estimate        (graphs: since 0.21)

The profile run (`gpu_model_runner.py` `profile_run`) is one forward pass over
max_num_batched_tokens dummy tokens, then the sampler over max_num_seqs rows of logits
(and, for multimodal models, the encoder over its budget first). docs/capacity.md cites the
lines. The sampler's term is in pdctl/capacity/sampler.py, version strings in engine.py.
`pdctl plan --from-log` shows where a prediction went wrong.
"""

from __future__ import annotations

from pdctl.capacity import quant
from pdctl.capacity.engine import PINNED, V1_FROM, _key, is_v1, patch_version, version
from pdctl.capacity.gpus import GIB, MIB
from pdctl.capacity.models import ModelConfig
from pdctl.capacity.sampler import (
    FLASHINFER_BYTES_PER_LOGIT,
    FLASHINFER_ONLY,
    SAMPLER_BYTES_PER_LOGIT,
    TRITON_TOPK_FROM,
    flashinfer_only,
    sampler_bytes,
    sm_count,
    triton_buffer_bytes,
    triton_topk,
    v2_runner,
)

GRAPHS_COUNTED_FROM = (0, 21)  # CUDA-graph memory profiled before the KV cache since 0.21
CHUNKED_V0_FROM_LEN = 32768  # V0 turned chunked prefill on by itself from this length

# The one GPU-model list with NVLink between cards (SXM/HGX boards); others talk over PCIe.
_NVLINK = ("h100sxm", "h100", "h200", "a10080gb", "a100sxm", "a10040gb", "b200", "gb200", "h20")


def nvlink(gpu_name: str) -> bool:
    """Whether cards of this GPU model are normally joined by NVLink (SXM boards)."""
    key = _key(gpu_name)
    if "pcie" in key:
        return False
    return any(key.startswith(k) for k in _NVLINK)


def default_batching(
    total_bytes: int, gpu_name: str = "", engine: str | None = None, model_len: int = 0
) -> tuple[int, int]:
    """vLLM's `vllm serve` defaults (max_num_batched_tokens, max_num_seqs).

    V1 (engine/arg_utils.py `get_batch_defaults`, 0.33.0): >= 160 GiB: 16384 / 1024;
    >= 70 GiB and not an A100: 8192 / 1024; else 2048 / 256. The A100 rule needs the name:
    an A100-80GB gets 2048 / 256. V0 (before 0.8): without chunked prefill (max_model_len
    below 32768) one batch holds a whole max-length prompt: max(max_model_len, 2048) / 256.
    """
    if not is_v1(engine):
        if model_len and model_len < CHUNKED_V0_FROM_LEN:
            return max(model_len, 2048), 256
        return 2048, 256
    if total_bytes >= 160 * GIB:
        return 16384, 1024
    if total_bytes >= 70 * GIB and "a100" not in gpu_name.lower():
        return 8192, 1024
    return 2048, 256


def forward_bytes(model: ModelConfig, tp: int, tokens: int, act: int, engine: str | None) -> int:
    """Peak of the dummy forward pass over `tokens` tokens on one GPU.

    The widest point of a layer is the MLP: the residual and hidden states (2 x hidden) plus
    the gate/up output and its activation (3 x MLP width / TP); attention (q, k, v) is
    narrower. V0 ran eager PyTorch with unfused intermediates: x1.4 (calibrated on V0 logs
    that print "PyTorch activation peak memory"); V1 compiles and fuses them.
    """
    mlp = 3 * model.mlp_width / tp
    attn = (model.heads + 2 * model.kv_heads) * model.head_dim / tp
    width = 2 * model.hidden + max(mlp, attn)
    factor = 1.0 if is_v1(engine) else 1.05
    if model.is_moe and model.experts_per_token:
        # fused MoE keeps every routed expert's output (top-k x hidden) until the reduce
        width = max(width, 2 * model.hidden + model.experts_per_token * model.hidden)
    return int(tokens * width * act * factor)


def encoder_tokens(model: ModelConfig, batched_tokens: int, seqs: int) -> int:
    """Language-model tokens of the dummy multimodal batch vLLM encodes in its profile run.

    The budget is max(max_num_batched_tokens, the largest item's tokens)
    (`compute_encoder_budget` in v1/core/encoder_cache_manager.py of 0.8.x; 0.33.0's
    `compute_mm_encoder_budget` the same for the compute budget and the cache size). The
    profile encodes cdiv(budget, item) copies of the largest item, at most max_num_seqs x one
    item a prompt (`profile_run` in v1/worker/gpu_model_runner.py: 0.8.x computes the item
    count there, 0.33.0 reads it from the runner's `mm_budget`). Qwen2.5-VL: one 16,384-token
    image however small max_num_batched_tokens is. Without a known item size: the batch
    budget.
    """
    item = model.vision_item_tokens
    if not model.vision_params:
        return 0
    if item <= 0:
        return batched_tokens
    items = min(-(-max(batched_tokens, item) // item), max(1, seqs))
    return items * item


def encoder_bytes(model: ModelConfig, tp: int, tokens: int, act: int) -> int:
    """A multimodal model's encoder profile: the vision tower over `tokens` language-model
    tokens of images (`encoder_tokens`), their embeddings kept for the forward pass.

    Each token is `vision_patches_per_token` patches; the widest point of a vision layer is
    its MLP (2 x hidden + 3 x intermediate / TP values a patch); attention is the memory-
    efficient kind (flash-attn or xformers, linear in the patches). Not yet checked against a
    log that separates the encoder's peak from the sampler's.
    """
    if not model.vision_params:
        return 0
    patches = tokens * model.vision_patches_per_token
    width = 2 * model.vision_hidden + 3 * model.vision_intermediate / tp
    return int(patches * width * act + tokens * model.hidden * act)


# From 0.23 the fused-MoE layers take their scratch from the worker's WorkspaceManager
# (vllm/v1/worker/workspace.py), which keeps it allocated after the forward pass: the
# sampler then runs on top of it. `TritonExperts.workspace_shapes`
# (vllm/model_executor/layers/fused_moe/experts/triton_moe.py, 0.23.0 l.141-156): (M, top-k,
# max(I, K)) shared with the (M, K) output, and (M, top-k, max(2I, K)), M the batch's tokens
# unchunked (modular_kernel.py l.1211-1235), I one expert's width on this rank, K hidden.
MOE_WORKSPACE_FROM = (0, 23)


def moe_workspace_bytes(
    model: ModelConfig, tp: int, tokens: int, act: int, engine: str | None, ep: int = 0,
    gpu_name: str = "",
) -> int:
    """The persistent fused-MoE scratch of a forward pass over `tokens` tokens (0 for dense
    models and engines before 0.23). gpt-oss's mxfp4 experts: none on Hopper (the OpenAI
    Triton kernels are not modular); off Hopper Marlin's (`MarlinExperts.workspace_shapes`,
    fused_moe/experts/marlin_moe.py l.700-730): the same two buffers over the padded width
    and hidden size (`quant.expert_dims`)."""
    if not model.is_moe or version(engine) < MOE_WORKSPACE_FROM:
        return 0
    if model.quantization == "mxfp4":
        if not quant.mxfp4_marlin(model, gpu_name):
            return 0
        width, hidden = quant.expert_dims(model, tp, ep, gpu_name)
    else:
        width = model.moe_intermediate // (1 if ep else tp)  # expert parallel: whole experts
        hidden = model.hidden
    k = model.experts_per_token
    first = max(tokens * k * max(width, hidden), tokens * hidden)
    second = tokens * k * max(2 * width, hidden)
    return (first + second) * act


def activation_bytes(
    model: ModelConfig, tp: int, tokens: int, seqs: int, act: int, engine: str | None,
    flashinfer: bool | None = None, sampler: bool = True, encoder: bool = True, gpu_name: str = "",
    ep: int = 0, spec_decode: bool = False,
) -> int:
    """The profile run's transient peak: the encoder, the forward pass or the sampler, the
    largest (they run one after the other). With PP the encoder runs on the first stage
    only (`encoder`) and the sampler on the last only (`sampler`).

    From 0.23 the fused-MoE workspace stays allocated (`moe_workspace_bytes`) and the
    forward's output hidden states are held while the sampler runs (`profile_run` keeps
    `hidden_states` until after `_dummy_sampler_run`): both under the sampler's peak."""
    workspace = moe_workspace_bytes(model, tp, tokens, act, engine, ep, gpu_name)
    forward = forward_bytes(model, tp, tokens, act, engine)
    if workspace:
        forward = max(forward, tokens * 2 * model.hidden * act + workspace)
    held = workspace + tokens * model.hidden * act if version(engine) >= MOE_WORKSPACE_FROM else 0
    return max(
        encoder_bytes(model, tp, encoder_tokens(model, tokens, seqs), act) if encoder else 0,
        forward, sampler_bytes(model, seqs, engine, flashinfer, gpu_name, spec_decode) + held
        if sampler else 0,
    )


# Non-torch growth measured by vLLM 0.11 on H100: 0.13 GiB at TP 1, 0.54-0.55 GiB at TP 2
# (llm-d-benchmark); V0 on PCIe cards printed 0.03-0.35 GiB, 0.25 GiB at TP 2 (vllm#13061).
CONTEXT_BYTES = int(0.13 * GIB)  # growth outside torch during the profile (cuBLAS, kernels)
NVLINK_TP_BYTES = int(0.42 * GIB)  # TP > 1 over NVLink: custom all-reduce + NCCL buffers
PCIE_TP_BYTES = int(0.12 * GIB)  # TP > 1 over PCIe: NCCL ring buffers only


# NCCL's NVLink SHARP (NVLS) buffers: NCCL turns NVLS on only with more than 2 GPUs on a board
# whose NVSwitch does multicast (src/transport/nvls.cc `ncclNvlsInit`: `gpuCount <= 2` returns
# without it; CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: Hopper and later SXM boards). Each
# communicator maps `nvlsPerRankSize x nHeads` bytes, one head per rank of a single-node group.
# The NCCL that vLLM up to 0.10.1 ran (torch <= 2.7) sized a rank's share as channels x 2 x
# (NCCL_BUFFSIZE 4 MiB + 2 MiB): vllm#9699 printed `nvlsPerRankSize 301989888 nvlsTotalSize
# 2415919104` at TP 8 on H200 (288 MiB a rank) and ~5 GiB fewer KV blocks than with
# NCCL_NVLS_ENABLE=0: two communicators (vLLM's PyNccl one and torch.distributed's process
# group of the TP ranks). Today's source (`ncclNvlsBufferSetup`) sizes it by NVLS chunks:
# 16 channels x 2 x 8 steps x 128 KiB = 32 MiB a rank; from vLLM 0.10.2 (torch 2.8).
NVLS_OLD_BYTES_PER_RANK = 288 * MIB
NVLS_BYTES_PER_RANK = 32 * MIB
NVLS_COMMUNICATORS = 2
NVLS_SMALL_BUFFERS_FROM = (0, 10, 2)
_NVLS = ("h100", "h200", "h20", "b200", "gb200")


def nvls(gpu_name: str) -> bool:
    """Whether the GPU model sits on an NVSwitch board with multicast (NVLS): Hopper and
    later SXM parts; PCIe and NVL (bridge-paired PCIe) cards have no NVSwitch."""
    key = _key(gpu_name)
    if "pcie" in key or key.endswith("nvl"):
        return False
    return any(key.startswith(k) for k in _NVLS)


def nvls_bytes(tp: int, gpu_name: str, engine: str | None = None) -> int:
    """NCCL's NVLS buffers per GPU for a TP group (none at TP <= 2 or without NVSwitch)."""
    if tp <= 2 or not nvls(gpu_name):
        return 0
    per_rank = (
        NVLS_BYTES_PER_RANK
        if patch_version(engine) >= NVLS_SMALL_BUFFERS_FROM
        else NVLS_OLD_BYTES_PER_RANK
    )
    return NVLS_COMMUNICATORS * tp * per_rank


def non_torch_bytes(tp: int, pp: int, gpu_name: str, engine: str | None = None) -> int:
    """Memory outside PyTorch's allocator: context, and with TP > 1 the all-reduce buffers.

    A flat 1.8 GiB for TP > 1 (pdctl before) was far too high on PCIe cards: vLLM's
    custom all-reduce needs NVLink (P2P) and NCCL's PCIe ring buffers are small. TP > 2 on an
    NVSwitch board adds NCCL's NVLS buffers (`nvls_bytes`).
    """
    extra = 0
    if tp > 1:
        extra = NVLINK_TP_BYTES if nvlink(gpu_name) else PCIE_TP_BYTES
    if pp > 1:
        extra += PCIE_TP_BYTES  # the point-to-point NCCL group between stages
    return CONTEXT_BYTES + extra + nvls_bytes(tp, gpu_name, engine)


def graph_bytes(model: ModelConfig, layers: int, seqs: int, eager: bool) -> int:
    """CUDA-graph pool vLLM estimates before the KV cache (`Estimated CUDA graph memory`).

    Logs show 0.09-0.36 GiB: a fixed part plus a little per layer captured, more with the
    number of capture sizes (up to max_num_seqs, capped at 512).
    """
    if eager:
        return 0
    sizes = min(seqs, 512)
    return int(48 * MIB + layers * 1.5 * MIB + sizes * 0.2 * MIB)


# Memory other processes hold on the GPU. vLLM 0.8.x's V1 worker (`v1/worker/gpu_worker.py`
# `determine_available_memory`, 0.8.5) took non-torch memory as mem_get_info's total - free -
# torch's allocated bytes after the profile run: every process's memory on the card, so what
# others held came out of total x util (vllm#17366, vllm#17431). vllm#19312 ("Reuse V0's
# memory_profiling util", merged June 2025, after 0.9.1) measures against the snapshot taken
# at start, as V0 did since vllm#2863; the worker then refuses to start when the free memory
# at start is below total x util ("Free memory on device ... on startup is less than desired
# GPU memory utilization", `init_device`; pdctl assumes it came with the same change).
OTHERS_COUNTED = ((0, 8, 0), (0, 9, 2))


def counts_other_processes(engine: str | None) -> bool:
    """Whether this engine takes other processes' GPU memory out of the KV budget."""
    low, high = OTHERS_COUNTED
    return low <= patch_version(engine) < high


def checks_free_memory(engine: str | None) -> bool:
    """Whether this engine refuses to start with less free memory than total x util."""
    return patch_version(engine) >= OTHERS_COUNTED[1]


def graphs_counted(engine: str | None, model: ModelConfig | None = None) -> bool:
    """Whether the CUDA-graph estimate comes out of the KV budget (0.21 and later, except
    the models vLLM 0.23's V2 model runner serves: `sampler.v2_runner`)."""
    if model is not None and v2_runner(model, engine):
        return False
    return version(engine) >= GRAPHS_COUNTED_FROM


# Tokens a sliding-window layer holds a request beyond its window: the in-flight batches.
# vLLM 0.23.0 `SlidingWindowSpec.max_admission_blocks_per_request`
# (vllm/v1/kv_cache_interface.py l.488-508): window - 1 + max_num_batched_tokens, one batch.
# vLLM 0.33.0 (same method, l.915-944): window - 1 + `VllmConfig.max_in_flight_tokens` =
# max_concurrent_batches x max_num_batched_tokens (vllm/config/vllm.py l.587-609: 2 with async
# scheduling at PP 1, else PP). The release between that made the change was not located;
# pdctl takes 0.24 and later as 0.33.
IN_FLIGHT_BATCHES_FROM = (0, 24)


# vLLM 0.23.0 schedules asynchronously unless told not to ("Asynchronous scheduling is enabled"
# in every H100 engine log of tests/fixtures/gpu/vllm023-h100*); the release that made it the
# default was not located, so earlier versions are taken as off unless `--async-scheduling`
# asks. With pipeline parallelism the batch queue holds PP batches instead (modelled as off).
ASYNC_SCHEDULING_FROM = (0, 23)


def async_scheduling(engine: str | None, pp: int, args: tuple[str, ...] | list[str]) -> bool:
    """Whether an engine plans its next step while one runs (pdctl.capacity.simulate)."""
    if "--no-async-scheduling" in args or pp > 1:
        return False
    return "--async-scheduling" in args or version(engine) >= ASYNC_SCHEDULING_FROM


def in_flight_batches(engine: str | None, pp: int) -> int:
    """Batches of max_num_batched_tokens a sliding-window layer keeps beyond its window."""
    if version(engine) < IN_FLIGHT_BATCHES_FROM:
        return 1
    return 2 if pp == 1 else pp


def mla_block(gpu_name: str) -> int:
    """MLA KV block size vLLM picks: FlashMLA on Hopper/Blackwell uses 64, Triton MLA 16."""
    key = _key(gpu_name)
    return 64 if any(key.startswith(k) for k in ("h100", "h200", "h20", "b200", "gb200")) else 16


__all__ = [
    "FLASHINFER_BYTES_PER_LOGIT", "FLASHINFER_ONLY", "PINNED", "SAMPLER_BYTES_PER_LOGIT",
    "TRITON_TOPK_FROM", "V1_FROM", "flashinfer_only", "is_v1", "patch_version", "sampler_bytes",
    "sm_count", "triton_buffer_bytes", "triton_topk", "v2_runner", "version",
]
