"""Per-GPU memory of one vLLM instance: weights, KV cache per token, overheads, KV capacity.

Every function is pure and closed-form. Sizes are bytes (int) unless a name says otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdctl.capacity import profile, quant
from pdctl.capacity.gpus import GIB
from pdctl.capacity.hybrid import HybridLayout
from pdctl.capacity.models import ModelConfig

DEFAULT_UTIL = 0.92  # vLLM's --gpu-memory-utilization default in the pinned versions
MAX_UTIL = 0.95  # above this vLLM leaves too little for the CUDA context and the allocator
BLOCK_SIZE = 16  # vLLM's default KV block (tokens); capacity is a whole number of blocks


def dtype_bytes(dtype: str, model: ModelConfig) -> int:
    """Bytes per value of weights/activations for `--dtype` (auto: the model's, fp32 -> bf16)."""
    if dtype in ("float", "float32"):
        return 4
    return 2


def stage_partition(layers: int, pp: int) -> tuple[int, ...]:
    """Layers of each pipeline stage as vLLM splits them (`get_pp_indices` in
    vllm/distributed/utils.py): `layers // pp` each, the remainder one a stage from the
    second-to-last backwards, never on the last (it holds the lm_head and the sampler).
    27 layers over 2 stages: (14, 13); 30 over 4: (7, 8, 8, 7)."""
    base, extra = divmod(layers, pp)
    parts = [base] * pp
    for i in range(2, extra + 2):
        parts[-i] += 1
    return tuple(parts)


def stage_layers(model: ModelConfig, pp: int) -> int:
    """Layers on the pipeline stage with the most layers."""
    return max(stage_partition(model.layers, pp))


def weights_bytes_per_gpu(
    model: ModelConfig, tp: int = 1, pp: int = 1, dtype: str = "auto", ep: int = 0,
    stage: int | None = None, gpu: str = "",
) -> int:
    """Weight bytes on one GPU of pipeline stage `stage` (None: the heaviest stage), split
    over its TP ranks. `gpu` (its name) sets how vLLM lays quantised weights out on it
    (`pdctl.capacity.quant`: Marlin off Hopper); '' keeps the Hopper layout.

    Linear layers use the checkpoint's quantized width (`weight_bits`, experts
    `expert_weight_bits`); embeddings and lm_head stay at the activation dtype. vLLM shards
    embeddings and lm_head over TP ranks too. A multimodal model's vision tower and projector
    (`vision_config`) load at the activation dtype on the first stage. With PP > 1 each stage
    holds its own layers (`stage_partition`); the first stage also the input embedding (and
    the vision tower), the last the lm_head (a copy of the embedding when tied).
    """
    if stage is None:
        return max(weights_bytes_per_gpu(model, tp, pp, dtype, ep, s, gpu) for s in range(pp))
    act = dtype_bytes(dtype, model)
    layer_params = model.params - model.embed_params - model.expert_params
    linear_bits = model.weight_bits if model.weight_bits < 16 else act * 8
    expert_bits = model.expert_weight_bits if model.expert_weight_bits < 16 else act * 8
    linear_bits = quant.linear_bits(model, linear_bits, gpu)  # fp8 on Marlin: bf16 scales
    expert_bits = quant.linear_bits(model, expert_bits, gpu)
    # mxfp4 experts as vLLM allocates them (quant.expert_scale): on Hopper each rank's width
    # padded to a multiple of 256 (gpt-oss 2880 -> 3072; "Model loading took 64.38 GiB" for
    # gpt-oss-120b, vllm#33155); on Marlin (A100, L40S) the width to 128, the hidden to 256
    expert_params = model.expert_params * quant.expert_scale(model, tp, ep, gpu)
    per_layer = (layer_params * linear_bits + expert_params * expert_bits) / 8 / model.layers
    layers = stage_partition(model.layers, pp)[stage]
    biases = quant.expert_bias_bytes(model, tp, ep, gpu) * layers  # on one rank already
    embed = model.embed_params * act
    if pp > 1:
        tied = model.embed_params <= model.vocab * model.hidden
        table = embed if tied else embed / 2  # one vocab x hidden table
        embed = table * ((stage == 0) + (stage == pp - 1))
    # the vision tower (first stage), sharded like the rest
    vision = model.vision_params * act if stage == 0 else 0
    if ep and ep != tp and expert_params:
        # Expert parallel (`--enable-expert-parallel`, docs/multinode.md): each GPU holds
        # 1/ep of the experts whole; the rest stays split over the TP ranks.
        dense = layer_params * linear_bits / 8 / model.layers
        experts = expert_params * expert_bits / 8 / model.layers
        return int((dense * layers + embed + vision) / tp + experts * layers / ep) + biases
    return int((per_layer * layers + embed + vision) / tp) + biases


def kv_bytes_per_token(
    model: ModelConfig, tp: int = 1, pp: int = 1, kv_cache_dtype: str = "auto", dtype: str = "auto"
) -> int:
    """KV-cache bytes one token takes on one GPU (the heaviest pipeline stage).

    Standard and GQA attention: 2 (K and V) x layers x KV heads a rank x head_dim x bytes
    (the KV heads split across TP ranks, replicated (1 each) when fewer than ranks).
    MLA (DeepSeek): one latent of kv_lora_rank + qk_rope_head_dim per layer, the same on every
    TP rank (not split). fp8 KV caches take 1 byte per value.
    """
    layers = stage_layers(model, pp)
    if model.hybrid is not None:  # only the full-attention layers keep KV (capacity.hybrid)
        layers = math.ceil(model.hybrid.full_layers / pp)
    width = 1 if kv_cache_dtype.startswith("fp8") else dtype_bytes(dtype, model)
    if model.mla_latent is not None:
        return layers * model.mla_latent * width
    return 2 * layers * max(1, model.kv_heads // tp) * model.head_dim * width


def tokens_in(available_bytes: int, per_token: int, block_size: int = BLOCK_SIZE) -> int:
    """KV tokens that fit in `available_bytes`: whole blocks of `block_size` tokens, as vLLM."""
    if available_bytes <= 0 or per_token <= 0:
        return 0
    return available_bytes // (per_token * block_size) * block_size


@dataclass(frozen=True)
class Overhead:
    """Per-GPU memory besides weights and KV: estimates, not measurements (see
    `pdctl.capacity.profile` for each term's form and docs/capacity.md for vLLM's lines).

    activation: the profile run's transient peak (forward pass over max_num_batched_tokens,
    or the sampler over max_num_seqs x vocab logits). non_torch: CUDA context, and with
    TP > 1 the all-reduce buffers (NVLink or PCIe). cuda_graphs: vLLM's estimate of the
    graph pool (0 with --enforce-eager). graphs_counted: whether the engine takes the graphs
    out of the KV budget (vLLM 0.21 and later); before, they came out of the margin.
    """

    activation: int
    non_torch: int
    cuda_graphs: int
    graphs_counted: bool = True

    @property
    def total(self) -> int:
        """What comes out of total x util before the KV cache."""
        return self.activation + self.non_torch + (self.cuda_graphs if self.graphs_counted else 0)


def overhead(
    model: ModelConfig, tp: int = 1, pp: int = 1, dtype: str = "auto",
    max_num_batched_tokens: int = 8192, max_num_seqs: int = 256, enforce_eager: bool = False,
    gpu_name: str = "", engine: str | None = None, flashinfer_sampler: bool | None = None,
    stage: int | None = None, ep: int = 0, spec_decode: bool = False,
) -> Overhead:
    """Estimate activation, non-torch and CUDA-graph memory per GPU (see `Overhead`).

    `stage`: the pipeline stage (None: every part on one GPU, the most any stage takes).
    `profile_run` encodes multimodal items on the first stage only and runs the sampler
    only on the last (`if get_pp_group().is_last_rank`); graphs cover the stage's layers.
    """
    act = dtype_bytes(dtype, model)
    first = stage is None or stage == 0
    last = stage is None or stage == pp - 1
    layers = stage_layers(model, pp) if stage is None else stage_partition(model.layers, pp)[stage]
    activation = profile.activation_bytes(
        model, tp, max_num_batched_tokens, max_num_seqs, act, engine, flashinfer_sampler,
        sampler=last, encoder=first, gpu_name=gpu_name, ep=ep, spec_decode=spec_decode,
    )
    return Overhead(
        activation=activation, non_torch=profile.non_torch_bytes(tp, pp, gpu_name, engine),
        cuda_graphs=profile.graph_bytes(model, layers, max_num_seqs, enforce_eager),
        graphs_counted=profile.graphs_counted(engine, model),
    )


@dataclass(frozen=True)
class KvLayout:
    """How vLLM's KV cache manager lays out one GPU's cache (v1/core/kv_cache_utils.py).

    layer_bytes: one token of one layer. Full-attention layers keep every token; sliding-
    window (or chunked-local) layers keep at most window - 1 + in-flight tokens a request.
    With both kinds vLLM makes groups of `group` layers that share one block pool: a block
    is `group` layers x block_size tokens; a request takes blocks from every group.

    Two token counts come out of it and differ with sliding windows (docs/capacity.md):
    `tokens` is vLLM's "GPU KV cache size" (concurrency at max_model_len x max_model_len:
    context tokens, of which a sliding layer keeps only its window), `slots` the tokens the
    pool stores at once (blocks x block_size over the groups every token takes a block in).
    """

    layer_bytes: int
    full_layers: int
    sliding_layers: int = 0
    window: int = 0
    in_flight: int = 0
    block_size: int = BLOCK_SIZE
    per_request: bool = True  # report tokens as concurrency x max_model_len (0.21 and later)

    @property
    def group(self) -> int:
        if self.full_layers and self.sliding_layers:
            return min(self.full_layers, self.sliding_layers)
        return self.full_layers or self.sliding_layers or 1

    @property
    def groups_per_token(self) -> int:
        """Block groups one token takes a block in (Gemma 2: a full and a sliding group)."""
        return math.ceil(self.full_layers / self.group) + math.ceil(
            self.sliding_layers / self.group
        )

    def blocks(self, available: int) -> int:
        """The pool's blocks: available // (layer bytes x block_size x group)
        (`get_num_blocks` in v1/core/kv_cache_utils.py)."""
        if available <= 0 or self.layer_bytes <= 0:
            return 0
        return available // (self.layer_bytes * self.block_size * self.group)

    def slots(self, available: int) -> int:
        """Tokens whose KV the pool stores at once: blocks x block_size / groups a token
        takes (Mistral-7B, one sliding group: every block of the pool; Gemma 2: half)."""
        return self.blocks(available) * self.block_size // max(1, self.groups_per_token)

    def sequences(self, available: int, length: int) -> int:
        """Requests of `length` tokens the pool holds at once: blocks over the blocks one
        such request takes (vLLM's `get_max_concurrency_for_kv_cache_config` at that
        length; a sliding layer keeps min(window - 1 + in-flight, length) tokens)."""
        if length <= 0:
            return 0
        return self.blocks(available) // self.blocks_per_request(length)

    def blocks_per_request(self, length: int) -> int:
        full = math.ceil(self.full_layers / self.group) * math.ceil(length / self.block_size)
        if not self.sliding_layers:
            return full
        held = min(self.window - 1 + self.in_flight, length)
        sliding = math.ceil(held / self.block_size) + 1
        return full + math.ceil(self.sliding_layers / self.group) * sliding

    def request_bytes(self, length: int) -> int:
        """KV bytes one request of `length` tokens needs (vLLM's `max_memory_usage_bytes`)."""
        page = self.layer_bytes * self.block_size
        full = self.full_layers * math.ceil(length / self.block_size) * page
        if not self.sliding_layers:
            return full
        held = min(self.window - 1 + self.in_flight, length)
        return full + self.sliding_layers * (math.ceil(held / self.block_size) + 1) * page

    def tokens(self, available: int, length: int) -> int:
        """vLLM's 'GPU KV cache size': concurrency at max_model_len x max_model_len."""
        if available <= 0 or self.layer_bytes <= 0 or length <= 0:
            return 0
        blocks = self.blocks(available)
        if not self.sliding_layers:
            return blocks * self.block_size
        if not self.per_request:  # older engines: the pool split evenly between groups
            return self.slots(available)
        return int(blocks / self.blocks_per_request(length) * length)


@dataclass(frozen=True)
class InstanceMemory:
    """One instance's memory on its most loaded GPU, at a memory fraction `util`."""

    total: int  # what CUDA reports as the GPU's (or the HAMi slice's) total
    util: float
    weights: int
    overhead: Overhead
    kv_per_token: int
    max_model_len: int
    block_size: int = BLOCK_SIZE
    # None: every layer full attention, kv_per_token a token; HybridLayout: linear/Mamba layers
    layout: KvLayout | HybridLayout | None = None
    stage: int = 0  # the pipeline stage these figures are of (the one that sets the tokens)
    used: int = 0  # bytes other processes held on the GPU when vLLM started
    used_counted: bool = False  # the engine took `used` as its own (V1 0.8.x; profile.py)
    free_checked: bool = False  # the engine refuses when total - used < budget
    lora: int = 0  # of `weights`: the LoRA buffers vLLM reserves (capacity/lora.py)
    # why vLLM refuses to start the role: its checkpoint on this GPU (capacity/quant.py), or
    # its batch limits (report.scheduler_refusal)
    refused: str = ""
    # bytes a KV connector holds on the GPU outside the budget: P2pNcclConnector's
    # kv_buffer_size (pdctl.plan.kv.p2p_buffer_bytes), allocated after vLLM sized its KV cache
    beside: int = 0

    @property
    def beside_short(self) -> bool:
        """The budget and the connector's buffer together exceed the GPU (or slice): the
        engine starts, then runs out of memory once the buffer fills."""
        return self.beside > 0 and self.budget + self.beside > self.total

    @property
    def budget(self) -> int:
        """total x util: what vLLM may use (vLLM rounds up: `request_memory`)."""
        return math.ceil(self.total * self.util)

    @property
    def kv_available(self) -> int:
        """Budget left for the KV cache: vLLM's 'Available KV cache memory'."""
        other = self.used if self.used_counted else 0
        return self.budget - self.weights - self.overhead.total - other

    @property
    def free_short(self) -> bool:
        """The engine refuses at start: less free than the budget (vLLM's 'Free memory on
        device ... on startup is less than desired GPU memory utilization')."""
        return self.free_checked and self.total - self.used < self.budget

    @property
    def kv_tokens(self) -> int:
        """vLLM's 'GPU KV cache size: N tokens' (`_report_kv_cache_config` in vLLM 0.23.0's
        v1/core/kv_cache_utils.py: int(concurrency at max_model_len x max_model_len)). With
        sliding-window layers these are context tokens, not stored ones (`kv_token_slots`)."""
        if self.layout is not None:
            return self.layout.tokens(self.kv_available, self.max_model_len)
        return tokens_in(self.kv_available, self.kv_per_token, self.block_size)

    @property
    def kv_token_slots(self) -> int:
        """Tokens whose KV the cache stores at once (every layer of each): the pool's blocks
        x block size over the groups a token takes a block in. The same as `kv_tokens`
        without sliding-window layers; below it when max_model_len passes the window (a
        long sequence keeps only its window), e.g. Mistral-7B at 32k: 935,680 vs 2,491,816."""
        if self.layout is not None:
            return self.layout.slots(self.kv_available)
        return self.kv_tokens

    def kv_sequences(self, length: int) -> int:
        """Sequences of `length` tokens the cache holds at once (vLLM's concurrency at that
        length, whole). Without sliding-window layers: kv_tokens // length."""
        if length <= 0:
            return 0
        if self.layout is not None:
            return self.layout.sequences(self.kv_available, length)
        return self.kv_tokens // length

    @property
    def kv_per_token_all_layers(self) -> int:
        """KV bytes one token takes in every layer of the GPU (`kv_per_token` counts the
        full-attention layers only when there are sliding-window ones)."""
        if self.layout is not None:
            return self.layout.layer_bytes * (self.layout.full_layers + self.layout.sliding_layers)
        return self.kv_per_token

    @property
    def kv_per_sequence(self) -> int:
        """KV bytes of one sequence of max_model_len tokens (sliding layers: their window)."""
        if self.layout is not None:
            return self.layout.request_bytes(self.max_model_len)
        return self.kv_per_token * self.max_model_len

    @property
    def concurrency(self) -> float:
        """Max-length sequences that fit at once (vLLM's 'Maximum concurrency')."""
        return self.kv_tokens / self.max_model_len if self.max_model_len else 0.0

    @property
    def fits(self) -> bool:
        """Weights, overheads and one max-length sequence fit: vLLM's start-up check
        (`_check_enough_kv_cache_memory`: available >= one request's KV bytes). Never where
        vLLM refuses the quantised weights on this GPU (`refused`)."""
        return self.fits_budget and not self.beside_short

    @property
    def fits_budget(self) -> bool:
        """`fits` but for a connector buffer beside the budget (`beside_short`)."""
        if self.free_short or self.refused:
            return False
        return self.kv_available >= self.kv_per_sequence and self.kv_available > 0

    @property
    def min_util(self) -> float:
        """The smallest memory fraction that still holds one max-length sequence."""
        other = self.used if self.used_counted else 0
        need = self.weights + self.overhead.total + self.kv_per_sequence + other
        return math.ceil(need / self.total * 100) / 100


def beside_util(total: int, beside: int, util: float) -> float:
    """`util` lowered by the share of the GPU a connector buffer takes beside the budget,
    rounded down to a hundredth (0.92 on an 80 GB H100 with an 8e9-byte buffer: 0.82)."""
    return math.floor(round((util - beside / total) * 100, 6)) / 100


def beside_notes(role: str, mem: InstanceMemory) -> tuple[str, ...]:
    """Why a role whose budget and P2pNccl buffer exceed the GPU does not fit, and the fix (the
    spec field to lower is the role's `gpuMemoryUtilization`)."""
    if not mem.beside_short:
        return ()
    path = f"{role}.gpuMemoryUtilization"
    top = beside_util(mem.total, mem.beside, 1.0)
    lower = f"lower {path} to {top:.2f} or less" if top > 0 else "use a larger GPU"
    room = (mem.total - mem.budget) / GIB  # what the buffer may take at this util
    fix = f"{lower}, or set disaggregation.gpuMemoryGib"
    if room * 10 >= 1:
        fix += f" to {math.floor(room * 10):g} or less (kv_buffer_size is 10% of it)"
    else:
        fix += " (kv_buffer_size is 10% of it)"
    return (
        f"{role}: P2pNcclConnector's kv_buffer_size ({mem.beside / GIB:.2f} GiB) is GPU "
        f"memory outside --gpu-memory-utilization: {mem.util:.2f} x {mem.total / GIB:.2f} GiB "
        f"+ {mem.beside / GIB:.2f} GiB > {mem.total / GIB:.2f} GiB, so the engine runs out of "
        f"memory once received KV fills the buffer; {fix}",
    )


def refusal_notes(role: str, mem: InstanceMemory) -> tuple[str, ...]:
    """The line that says vLLM refuses this role's quantised weights on its GPU."""
    return (f"{role}: {mem.refused}",) if mem.refused else ()


def used_memory_notes(role: str, mem: InstanceMemory, engine: str) -> tuple[str, ...]:
    """What other processes' memory on the GPU does to this role under its engine version."""
    if mem.used <= 0:
        return ()
    used = f"{mem.used / GIB:.2f} GiB"
    if mem.used_counted:
        return (
            f"{role}: the GPU already has {used} in use by other processes; vLLM {engine} "
            "(V1, 0.8.x) counts it as its own non-torch memory and takes it out of the KV "
            "cache (vllm#17431); stop them or use vLLM 0.9.2 or later",
        )
    if mem.free_short:
        return (
            f"{role}: the GPU already has {used} in use by other processes: less free than "
            f"total x {mem.util}; vLLM {engine} refuses to start ('Free memory on device ... "
            "less than desired GPU memory utilization'); lower gpuMemoryUtilization",
        )
    return ()
