"""Does a model fit: per-instance memory for a shape, the smallest TP, the nearest fitting shape."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from pdctl.capacity import quant
from pdctl.capacity.gpus import GIB
from pdctl.capacity.hybrid import hybrid_block_size, stage_layout
from pdctl.capacity.lora import LoraShape
from pdctl.capacity.lora import gpu_bytes as lora_gpu_bytes
from pdctl.capacity.memory import (
    DEFAULT_UTIL,
    MAX_UTIL,
    InstanceMemory,
    KvLayout,
    Overhead,
    dtype_bytes,
    kv_bytes_per_token,
    overhead,
    stage_partition,
    weights_bytes_per_gpu,
)
from pdctl.capacity.models import ModelConfig
from pdctl.capacity.profile import (
    GRAPHS_COUNTED_FROM,
    PINNED,
    checks_free_memory,
    counts_other_processes,
    default_batching,
    in_flight_batches,
    mla_block,
    version,
)
from pdctl.capacity.speculative import Draft, draft_of
from pdctl.plan import parallel
from pdctl.plan.parallel import Dims


@dataclass(frozen=True)
class Shape:
    """How one instance runs: parallelism, dtypes, limits (vLLM flags of the same names)."""

    tp: int = 1
    pp: int = 1
    ep: int = 0  # expert-parallel size (TP x DP with expertParallel); 0: experts split by TP
    dp: int = 1  # data-parallel ranks of the instance: each rank has its own KV cache and batch
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    max_model_len: int | None = None  # None: the model's own limit
    max_num_seqs: int | None = None  # None: vLLM's default for the GPU's memory size
    max_num_batched_tokens: int | None = None  # None: the same
    enforce_eager: bool = False
    # the scheduler plans step N+1 while step N runs (profile.async_scheduling: vLLM 0.23's
    # default at PP 1): a request that arrives mid-step waits for the step after next
    async_scheduling: bool = True
    gpu: str = ""  # the GPU model's name: vLLM's defaults and the interconnect depend on it
    engine: str = PINNED  # the vLLM version: the profiler's behaviour changed across versions
    # FlashInfer installed (the vllm/vllm-openai image: yes); None: the image's. Only 0.9-0.10
    # profile their sampler with FlashInfer alone (see pdctl.capacity.profile.sampler_bytes).
    flashinfer_sampler: bool | None = None
    lora: LoraShape | None = None  # LoRA on (model.lora): its GPU buffers count as weights
    # the role's `speculative` section (spec.speculative.Speculative): its draft's weights and
    # KV layers count where pdctl knows the draft (capacity.speculative)
    speculative: Any = None

    def model_len(self, model: ModelConfig) -> int:
        return self.max_model_len or model.max_position

    def batching(self, total_bytes: int | None, model_len: int = 0) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs), vLLM's defaults filled in for a GPU (or
        slice) of `total_bytes` named `self.gpu`; without a GPU the large-GPU defaults."""
        tokens, seqs = default_batching(
            total_bytes if total_bytes is not None else 80 * GIB, self.gpu, self.engine, model_len
        )
        return self.max_num_batched_tokens or tokens, self.max_num_seqs or seqs


@dataclass(frozen=True)
class ModelFit:
    """The model-only numbers preflight needs, per GPU of the heaviest stage.

    `need_bytes` = weights + overheads + one max-length sequence of KV: the least
    `total x --gpu-memory-utilization` a GPU (or slice) must give one instance.
    """

    weights: int
    kv_per_token: int
    max_model_len: int
    overhead: int
    state: int = 0  # hybrid models: one sequence's linear/Mamba state (capacity.hybrid)

    @property
    def kv_per_sequence(self) -> int:
        return self.kv_per_token * self.max_model_len + self.state

    @property
    def need_bytes(self) -> int:
        return self.weights + self.overhead + self.kv_per_sequence


def model_fit(model: ModelConfig, shape: Shape) -> ModelFit:
    """Weights and KV per GPU for `shape` (no GPU needed): the pipeline stage that needs the
    most (each PP rank profiles its own part, `instance_memory`)."""
    tokens, seqs = shape.batching(None, shape.model_len(model))
    fits = []
    draft = _draft(model, shape)
    for stage in range(shape.pp):
        last = stage == shape.pp - 1
        over = _overhead(model, shape, tokens, seqs, stage)
        per_token = kv_bytes_per_token(model, shape.tp, 1, shape.kv_cache_dtype, shape.dtype)
        layers = stage_partition(model.layers, shape.pp)[stage]
        fits.append(
            ModelFit(
                weights=weights_bytes_per_gpu(
                    model, shape.tp, shape.pp, shape.dtype, shape.ep, stage=stage, gpu=shape.gpu
                )
                + lora_gpu_bytes(
                    model, shape.lora, shape.tp, layers, dtype_bytes(shape.dtype, model)
                ),
                kv_per_token=per_token // model.layers * layers
                + (draft.kv_per_token if draft is not None and last else 0),
                max_model_len=shape.model_len(model),
                overhead=over.total + (draft.weights if draft is not None and last else 0),
                state=_hybrid_state(model, shape),
            )
        )
    return max(fits, key=lambda f: f.need_bytes)


def _hybrid_state(model: ModelConfig, shape: Shape) -> int:
    """One sequence's linear/Mamba state bytes on one GPU (0: not a hybrid model)."""
    if model.hybrid is None:
        return 0
    state = model.hybrid.state_bytes(shape.tp, dtype_bytes(shape.dtype, model))
    return state * math.ceil(model.hybrid.linear_layers / shape.pp)


def _draft(model: ModelConfig, shape: Shape) -> Draft | None:
    """The role's draft where pdctl knows it (None: no speculative decoding, or unknown)."""
    if shape.speculative is None:
        return None
    found = draft_of(shape.speculative, model, shape.tp, shape.dtype, shape.kv_cache_dtype)
    return found if isinstance(found, Draft) else None


def instance_memory(
    model: ModelConfig, total_bytes: int, util: float, shape: Shape, used: int = 0
) -> InstanceMemory:
    """Memory of one instance whose GPUs (or slices) report `total_bytes`, at `util`.

    With PP > 1 every stage profiles its own layers and vLLM gives every rank the fewest
    blocks any rank has (`unify_kv_cache_configs` in v1/core/kv_cache_utils.py): the stage
    with the fewest KV tokens (one that does not fit first) is returned, `stage` says which.
    `used`: bytes other processes hold on the GPU when vLLM starts (preflight's recording).
    """
    stages = stage_memories(model, total_bytes, util, shape, used)
    return min(stages, key=lambda m: (m.fits, m.kv_tokens))


def stage_memories(
    model: ModelConfig, total_bytes: int, util: float, shape: Shape, used: int = 0
) -> tuple[InstanceMemory, ...]:
    """The memory of one GPU of each pipeline stage, first to last (what each rank prints)."""
    return tuple(_stage_memory(model, total_bytes, util, shape, s, used) for s in range(shape.pp))


def _stage_memory(
    model: ModelConfig, total_bytes: int, util: float, shape: Shape, stage: int, used: int
) -> InstanceMemory:
    block = mla_block(shape.gpu) if model.is_mla else 16
    length = shape.model_len(model)
    tokens, seqs = shape.batching(total_bytes, length)
    layers = stage_partition(model.layers, shape.pp)[stage]
    # bytes per token of one layer x the stage's layers (MLA: one latent a layer)
    per_token = kv_bytes_per_token(model, shape.tp, 1, shape.kv_cache_dtype, shape.dtype)
    per_token = per_token // model.layers * layers
    layout = None
    hybrid = None
    if model.sliding_layers and model.sliding_window:
        sliding = min(layers, math.ceil(model.sliding_layers / shape.pp))
        layout = KvLayout(
            layer_bytes=per_token // layers,
            full_layers=layers - sliding,
            sliding_layers=sliding,
            window=model.sliding_window,
            in_flight=tokens * in_flight_batches(shape.engine, shape.pp),
            block_size=block,
            per_request=version(shape.engine) >= GRAPHS_COUNTED_FROM,
        )
        per_token = layout.layer_bytes * max(1, layout.full_layers)
    if model.hybrid is not None:  # linear/Mamba layers: one state a sequence (capacity.hybrid)
        full = math.ceil(model.hybrid.full_layers / shape.pp)
        hybrid = stage_layout(
            model.hybrid,
            kv_bytes_per_token(model, shape.tp, shape.pp, shape.kv_cache_dtype, shape.dtype)
            // max(1, full),
            shape.tp,
            dtype_bytes(shape.dtype, model),
            shape.pp,
        )
        block = hybrid.block_size
        per_token = hybrid.layer_bytes * max(1, hybrid.full_layers)
    draft = _draft(model, shape) if stage == shape.pp - 1 else None  # the last rank's
    if draft is not None and draft.layers:
        if hybrid is not None:  # the draft's attention layers join the full-attention groups
            hybrid = replace(hybrid, full_layers=hybrid.full_layers + draft.layers)
        elif layout is not None:
            layout = replace(layout, full_layers=layout.full_layers + draft.layers)
        per_token += draft.kv_per_token
    if hybrid is not None and draft is not None and draft.num_spec:
        # the states keep one more conv column and one more block per speculative token
        # (mamba_utils.py num_spec; MambaSpec.num_speculative_blocks)
        state = model.hybrid.state_bytes(shape.tp, dtype_bytes(shape.dtype, model), draft.num_spec)
        hybrid = replace(hybrid, state_bytes=state, spec_blocks=draft.num_spec)
        hybrid = replace(hybrid, block_size=hybrid_block_size(hybrid.layer_bytes, state))
        block = hybrid.block_size
    lora = lora_gpu_bytes(model, shape.lora, shape.tp, layers, dtype_bytes(shape.dtype, model))
    return InstanceMemory(
        total=total_bytes,
        util=util,
        weights=weights_bytes_per_gpu(
            model, shape.tp, shape.pp, shape.dtype, shape.ep, stage=stage, gpu=shape.gpu
        )
        + lora
        + (draft.weights if draft is not None else 0),
        lora=lora,
        overhead=_overhead(model, shape, tokens, seqs, stage),
        kv_per_token=per_token,
        max_model_len=length,
        block_size=block,
        layout=hybrid if model.hybrid is not None else layout,
        stage=stage,
        used=used,
        used_counted=counts_other_processes(shape.engine),
        free_checked=checks_free_memory(shape.engine),
        refused=quant.refusal(model, shape.gpu),
    )


def _overhead(model: ModelConfig, shape: Shape, tokens: int, seqs: int, stage: int) -> Overhead:
    """The activation, non-torch and graph memory of one GPU of `stage` (see `overhead`)."""
    return overhead(
        model,
        shape.tp,
        shape.pp,
        shape.dtype,
        tokens,
        seqs,
        shape.enforce_eager,
        shape.gpu,
        shape.engine,
        shape.flashinfer_sampler,
        stage=stage if shape.pp > 1 else None,
        ep=shape.ep,
        spec_decode=shape.speculative is not None,
    )


def valid_tp(model: ModelConfig, tp: int, expert_parallel: bool = False) -> bool:
    """vLLM's rule, the one `validate` applies (`pdctl.plan.parallel.valid_tp`): TP divides
    the attention heads and the MLP widths, and the KV heads split evenly or are replicated a
    whole number of times (MLA: the heads only)."""
    return tp in parallel.valid_tp(Dims.of(model), limit=tp, expert_parallel=expert_parallel)


def smallest_fit(
    model: ModelConfig,
    total_bytes: int,
    shape: Shape,
    util: float = DEFAULT_UTIL,
    gpus_per_node: int = 8,
    max_tp: int = 16,
    max_pp: int = 8,
    used: int = 0,
) -> Shape | None:
    """The smallest TP (then PP across nodes) at which one max-length sequence fits at `util`,
    or None.

    Tries TP = 1, 2, 4, 8 (up to `gpus_per_node` and `max_tp`; only a TP vLLM accepts for the
    model's heads and MLP widths), then PP = 2, 3, 4 ... 8 at the largest of those TPs. `max_tp`
    1 is for HAMi slices, where `validate` refuses TP > 1 unless `allowTensorParallel` is set.
    """
    found = smallest_fit_at(model, total_bytes, shape, (util,), gpus_per_node, max_tp, max_pp, used)
    return found[0] if found else None


def smallest_fit_at(
    model: ModelConfig,
    total_bytes: int,
    shape: Shape,
    utils: tuple[float, ...],
    gpus_per_node: int = 8,
    max_tp: int = 16,
    max_pp: int = 8,
    used: int = 0,
) -> tuple[Shape, float] | None:
    """The smallest shape (as `smallest_fit` orders them) that fits at one of `utils`, and the
    first of `utils` it fits at: with (0.90, 0.95), TP 2 at 0.95 comes before TP 4 at 0.90."""
    tps = [
        t
        for t in (1, 2, 4, 8, 16)
        if t <= min(gpus_per_node, max_tp) and valid_tp(model, t, shape.ep > 0)
    ]
    top = tps[-1] if tps else 1
    # expert parallel spans every TP x DP GPU: it follows TP
    candidates = [replace(shape, tp=tp, pp=1, ep=_ep(shape, tp)) for tp in tps] + [
        replace(shape, tp=top, pp=pp, ep=_ep(shape, top))
        for pp in range(2, min(max_pp, model.layers) + 1)  # a stage needs a layer
    ]
    for candidate in candidates:
        for util in utils:
            if instance_memory(model, total_bytes, util, candidate, used).fits:
                return candidate, util
    return None


def _ep(shape: Shape, tp: int) -> int:
    return tp * shape.dp if shape.ep else 0


def longest_len(
    model: ModelConfig, total_bytes: int, util: float, shape: Shape, used: int = 0
) -> int:
    """The longest max_model_len (a multiple of 1024, else of 16) that fits at `shape`."""
    mem = instance_memory(model, total_bytes, util, replace(shape, max_model_len=16), used)
    tokens = mem.kv_tokens
    return tokens // 1024 * 1024 if tokens >= 1024 else tokens


@dataclass(frozen=True)
class Alternative:
    """A nearby shape that fits, and what changes."""

    change: str
    shape: Shape
    kv_tokens: int
    util: float | None = None  # the --gpu-memory-utilization it fits at
    share: tuple[tuple[str, int], ...] = ()  # decode.share fields it sets (HAMi slices)


def alternatives(
    model: ModelConfig,
    total_bytes: int,
    shape: Shape,
    util: float = DEFAULT_UTIL,
    gpus_per_node: int = 8,
    max_tp: int = 16,
    max_pp: int = 8,
    used: int = 0,
    min_len: int = 0,
) -> tuple[Alternative, ...]:
    """Fitting shapes nearest to `shape`, least change first: a higher memory fraction (or, with
    less free than total x util because of `used`, the highest the free memory allows), fewer
    sequences in the profile (`--max-num-seqs`, then `--max-num-batched-tokens`), fp8 KV, a
    shorter max_model_len (never below `min_len`, the workload's prompt + output, which vLLM
    would reject), more TP (or PP).

    Each is one the other rules accept: TPs that `valid_tp` allows (heads, widths, quantisation
    blocks) on at most `gpus_per_node` GPUs, as `smallest_fit` searches."""
    out: list[Alternative] = []

    def add(change: str, candidate: Shape, at: float) -> None:
        mem = instance_memory(model, total_bytes, at, candidate, used)
        if mem.fits:
            out.append(Alternative(change, candidate, mem.kv_tokens, at))

    free = math.floor((total_bytes - used) / total_bytes * 100) / 100 if used else MAX_UTIL
    also = ""
    if util < min(MAX_UTIL, free):
        add(f"--gpu-memory-utilization {min(MAX_UTIL, free)}", shape, min(MAX_UTIL, free))
    elif free < util:  # vLLM refuses to start: only a lower fraction can work
        util, also = free, f" at --gpu-memory-utilization {free} (what the free memory allows)"
        add(f"--gpu-memory-utilization {free} (what the free memory allows)", shape, free)
    batching = _smaller_batch(model, total_bytes, shape, util, used)
    if batching is not None:
        add(batching[0] + also, batching[1], util)
    if not shape.kv_cache_dtype.startswith("fp8") and not model.is_mla:
        fp8 = replace(shape, kv_cache_dtype="fp8")
        add("--kv-cache-dtype fp8 (half the KV bytes)" + also, fp8, util)
    length = longest_len(model, total_bytes, util, shape, used)
    if max(0, min_len - 1) < length < shape.model_len(model):
        add(f"--max-model-len {length}" + also, replace(shape, max_model_len=length), util)
    # The same search as the plan's "smallest fit" row: at the fraction in use, then (if it is
    # lower and the free memory allows) at 0.95, so "TP 2 at 0.95" is offered beside "TP 4".
    utils = (util, MAX_UTIL) if not also and util < min(MAX_UTIL, free) else (util,)
    found = smallest_fit_at(model, total_bytes, shape, utils, gpus_per_node, max_tp, max_pp, used)
    if found is not None and found[1] != util:
        higher, at = found
        if (higher.tp, higher.pp) != (shape.tp, shape.pp):
            add(f"{_parallel(higher)} at --gpu-memory-utilization {at}", higher, at)
            also = also or f" at --gpu-memory-utilization {util:.2f}"
    bigger = smallest_fit(model, total_bytes, shape, util, gpus_per_node, max_tp, max_pp, used)
    if bigger is not None and (bigger.tp, bigger.pp) != (shape.tp, shape.pp):
        add(_parallel(bigger) + also, bigger, util)
    return tuple(out)


# --max-num-seqs values tried below vLLM's default (largest first): the profile's sampler
# run is max_num_seqs x vocab logits, often the largest term on a large GPU
_SEQS = (512, 256, 128, 64, 32, 16, 8)
_BATCHED = (8192, 4096, 2048)  # --max-num-batched-tokens: the forward pass's tokens


def _smaller_batch(
    model: ModelConfig, total_bytes: int, shape: Shape, util: float, used: int
) -> tuple[str, Shape] | None:
    """The largest --max-num-seqs (else --max-num-batched-tokens) below the shape's own that
    fits, keeping max_num_batched_tokens >= max_num_seqs (vLLM's SchedulerConfig refuses
    fewer)."""
    length = shape.model_len(model)
    tokens, seqs = shape.batching(total_bytes, length)
    for n in _SEQS:
        if n < seqs and n <= tokens:
            candidate = replace(shape, max_num_seqs=n)
            if instance_memory(model, total_bytes, util, candidate, used).fits:
                return f"--max-num-seqs {n} (the profile's sampler over fewer rows)", candidate
    for n in _BATCHED:
        if n < tokens and n >= seqs:
            candidate = replace(shape, max_num_batched_tokens=n)
            if instance_memory(model, total_bytes, util, candidate, used).fits:
                return f"--max-num-batched-tokens {n} (a smaller profile forward pass)", candidate
    return None


def _parallel(shape: Shape) -> str:
    return (
        f"tensorParallel {shape.tp}"
        + (f", pipeline {shape.pp}" if shape.pp > 1 else "")
        + (f" (x dataParallel {shape.dp})" if shape.dp > 1 else "")
    )
