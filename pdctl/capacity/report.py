"""The whole capacity plan of a spec: every role's memory, speed, slices, P:D ratio, advice.
Its JSON form: pdctl.capacity.report_json."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pdctl.capacity.advice import Advice, packing_advice, unfit_advice, unmet_tpot_advice
from pdctl.capacity.fit import (
    Alternative,
    Shape,
    alternatives,
    instance_memory,
    smallest_fit_at,
)
from pdctl.capacity.gpus import MIB, GpuType, a_gpu
from pdctl.capacity.kv_pull import pull_notes
from pdctl.capacity.memory import (
    DEFAULT_UTIL,
    MAX_UTIL,
    InstanceMemory,
    beside_notes,
    beside_util,
    refusal_notes,
    used_memory_notes,
)
from pdctl.capacity.memory_features import (
    offload_cache_notes,
    offload_notes,
    speculative_notes,
)
from pdctl.capacity.models import ModelConfig
from pdctl.capacity.roofline import (
    DecodeEstimate,
    best_batch,
    decode_step,
    prefill_tokens_per_s,
    ridge_batch,
)
from pdctl.capacity.slice import DecodeSlice, decode_slice, slice_alternatives
from pdctl.plan.kv import p2p_buffer_bytes
from pdctl.plan.parallel import gpus_per_host

if TYPE_CHECKING:
    from pdctl.spec.model import Spec


@dataclass(frozen=True)
class Traffic:
    """The workload: mean prompt and output lengths, rate, latency targets (all optional)."""

    prompt_tokens: int = 1024
    output_tokens: int = 256
    requests_per_second: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None

    @property
    def context(self) -> int:
        """Tokens a finished sequence holds (what the KV cache must keep)."""
        return self.prompt_tokens + self.output_tokens

    @property
    def mean_context(self) -> int:
        """Mean tokens a decoding sequence holds (what a decode step reads)."""
        return self.prompt_tokens + self.output_tokens // 2


@dataclass(frozen=True)
class RolePlan:
    """One role (serve, prefill or decode) of the spec on its GPU (or slice)."""

    role: str
    replicas: int
    shape: Shape
    util: float  # the memory fraction evaluated: the spec's, else the recommendation
    util_from_spec: bool
    recommended_util: float | None  # None: does not fit at any safe fraction
    memory: InstanceMemory
    smallest: Shape | None
    alternatives: tuple[Alternative, ...]
    batch: int  # decode batch for the speed figures
    decode: DecodeEstimate
    prefill_tokens_per_s: float
    slice: DecodeSlice | None = None
    smallest_util: float | None = None  # the memory fraction `smallest` fits at

    @property
    def fits(self) -> bool:
        return self.memory.fits and (self.slice is None or self.slice.fits)


@dataclass(frozen=True)
class PdRatio:
    """Prefill and decode instances for the traffic (or per decode instance, without a rate)."""

    prefill_s_per_request: float  # GPU-instance seconds of prefill per request
    decode_s_per_request: float  # instance seconds of decode per request at the batch
    prefill_per_decode: float
    prefill_instances: int | None
    decode_instances: int | None
    decode_concurrency: float | None  # sequences decoding at once (Little's law)
    ttft_ok: bool | None
    tpot_ok: bool | None = None  # None: no --tpot-ms; False: even batch 1 is slower
    batch1_tpot_ms: float = 0.0  # the decode step of one sequence alone (expected)


@dataclass(frozen=True)
class CapacityPlan:
    model: ModelConfig
    gpu: GpuType
    phase: int
    traffic: Traffic
    roles: tuple[RolePlan, ...]
    pd: PdRatio
    advice: Advice
    warnings: tuple[str, ...] = ()  # what the plan assumed (no GPU given, unknown GPU, ...)

    @property
    def disaggregated(self) -> bool:
        """Prefill and decode planned apart (phases 2 and 3)."""
        return self.phase in (2, 3)

    @property
    def fits(self) -> bool:
        """Every role fits (what `pdctl plan` turns into its exit code)."""
        return all(r.fits for r in self.roles)

    def role(self, name: str) -> RolePlan | None:
        return next((r for r in self.roles if r.role == name), None)


def _slice(
    model: ModelConfig, gpu_mib: int, shape: Shape, share: Any, spec_util: float | None
) -> tuple[DecodeSlice, float | None]:
    """The decode slice of `share` at the spec's util (if any), and the util the slice's own
    formula recommends."""
    eager = getattr(share, "enforce_eager", None)

    def at(util: float | None) -> DecodeSlice:
        return decode_slice(
            model, gpu_mib, shape, share.per_gpu, share.gpu_memory_percent, share.gpu_memory_mib,
            eager, util,
        )

    sl = at(spec_util)
    return sl, (sl if spec_util is None else at(None)).gpu_memory_utilization


def role_plan(
    model: ModelConfig, gpu: GpuType, role: str, section: Any, shape: Shape, traffic: Traffic,
    used: int = 0, gpus_per_node: int = 8, beside: int = 0,
) -> RolePlan:
    """One role's plan. `gpus_per_node`: the most GPUs a host of the spec lists (validate
    refuses a larger TP), which bounds every TP suggestion. `beside`: bytes a KV connector
    holds on each GPU outside the --gpu-memory-utilization budget (P2pNccl's buffer): the
    recommended fraction leaves room for it and a budget + buffer above the GPU does not fit."""
    shape = replace(shape, gpu=shape.gpu or gpu.name)
    share = getattr(section, "share", None) if role == "decode" else None
    spec_util = getattr(section, "gpu_memory_utilization", None) if section else None
    sl = None
    # Suggestions obey validate's rules: no TP > 1 (and no PP) on HAMi slices unless allowed.
    max_tp, max_pp = 16, 8
    if share is not None and not getattr(share, "allow_tensor_parallel", False):
        max_tp, max_pp = 1, 1
    if share is not None:
        gpu_mib = getattr(share, "gpu_total_mib", None) or gpu.memory_mib
        sl, recommended = _slice(model, gpu_mib, shape, share, spec_util)
        total = sl.slice_mib * MIB
        shape = replace(shape, enforce_eager=sl.enforce_eager)
    else:
        total = gpu.usable_bytes
        safe = tuple(beside_util(total, beside, u) for u in (DEFAULT_UTIL, MAX_UTIL))
        fitting = (u for u in safe if instance_memory(model, total, u, shape, used).fits)
        recommended = next(fitting, None)
    util = spec_util or recommended or DEFAULT_UTIL
    mem = instance_memory(model, total, util, shape, used if share is None else 0)
    mem = replace(mem, beside=beside)
    scheduler = scheduler_refusal(role, shape, *shape.batching(total, mem.max_model_len))
    if scheduler and not mem.refused:
        mem = replace(mem, refused=scheduler)
    # "Smallest fit on this GPU": whole GPUs, at the role's fraction and then at 0.95 (the
    # same search as the TP suggestion of `alternatives`); a slice's own fraction says nothing
    # of a whole GPU, so there vLLM's default first.
    first = util if share is None else DEFAULT_UTIL
    top = beside_util(gpu.usable_bytes, beside, MAX_UTIL)
    if mem.beside_short:
        first = min(first, top)
    smallest = smallest_fit_at(
        model, gpu.usable_bytes, shape, (first, top) if first < top else (first,),
        gpus_per_node=gpus_per_node, max_tp=max_tp, max_pp=max_pp, used=mem.used,
    )
    seqs = shape.batching(total)[1]
    # sequences of this context the cache holds (not kv_tokens // context: with sliding
    # windows vLLM's count is of max-length contexts, which keep only their window)
    kv_batch = max(1, mem.kv_sequences(traffic.context)) if mem.kv_tokens else 0
    # co-located decode instances time-slice the GPU (roofline.TIME_SLICE_EFFICIENCY)
    per_gpu = sl.per_gpu if sl is not None else 1
    batch = best_batch(
        model, gpu, shape, traffic.mean_context, max(1, min(seqs, kv_batch or 1)), traffic.tpot_ms,
        per_gpu,
    )
    return RolePlan(
        role=role, replicas=section.replicas if section is not None else 1, shape=shape, util=util,
        util_from_spec=spec_util is not None, recommended_util=recommended, memory=mem,
        smallest=smallest[0] if smallest else None, smallest_util=smallest[1] if smallest else None,
        alternatives=(
            ()
            if mem.fits_budget or scheduler  # beside_notes says what fixes the buffer
            else alternatives(
                model, total, shape, util, gpus_per_node=gpus_per_node, max_tp=max_tp,
                max_pp=max_pp, used=mem.used, min_len=traffic.context,
            )
        )
        + slice_alternatives(model, shape, sl, share),
        batch=batch, decode=decode_step(model, gpu, shape, batch, traffic.mean_context, per_gpu),
        prefill_tokens_per_s=prefill_tokens_per_s(model, gpu, shape, traffic.prompt_tokens),
        slice=sl,
    )


def scheduler_refusal(role: str, shape: Shape, tokens: int, seqs: int) -> str:
    """'' or why vLLM refuses the role's batching as planned, defaults filled in: fewer
    --max-num-batched-tokens than --max-num-seqs (vLLM 0.23.0 vllm/config/scheduler.py,
    `SchedulerConfig.verify_max_model_len`: "max_num_batched_tokens (...) must be greater
    than or equal to max_num_seqs (...)", a ValueError at start-up)."""
    if tokens >= seqs:
        return ""
    said = {True: "", False: " (vLLM's default here)"}
    return (
        f"vLLM would refuse to start it: max_num_batched_tokens ({tokens:,})"
        f"{said[shape.max_num_batched_tokens is not None]} must be greater than or equal to "
        f"max_num_seqs ({seqs:,}){said[shape.max_num_seqs is not None]} "
        "(SchedulerConfig, vllm/config/scheduler.py); "
        f"set {role}.maxNumBatchedTokens to {seqs} or more, or {role}.maxNumSeqs to "
        f"{tokens} or less"
    )


def connector_buffer(spec: Spec, role: str) -> int:
    """Bytes the KV connector holds on each GPU of `role` outside vLLM's budget: P2pNccl's
    kv_buffer_size (the decode's; a prefill's is P2P_PRODUCER_BUFFER, 10 bytes, counted too
    though it changes nothing), from the one function p2p_config emits it with. Mooncake and
    NIXL register vLLM's own KV cache for transfer and keep no GPU buffer of their own."""
    dis = getattr(spec, "disaggregation", None)
    if not spec.disaggregated or dis is None or dis.connector != "p2p-nccl":
        return 0
    if getattr(spec, "engine", None) is not None and spec.engine.device == "cpu":
        return 0
    return p2p_buffer_bytes(dis, role)


def _pd(
    model: ModelConfig, gpu: GpuType, prefill: RolePlan, decode: RolePlan, traffic: Traffic
) -> PdRatio:
    # instance seconds a request: DP ranks each prefill and decode their own requests
    pre_s = traffic.prompt_tokens / prefill.prefill_tokens_per_s
    dec_s = (
        traffic.output_tokens
        * decode.decode.step_expected_s
        / max(1, decode.batch)
        / decode.shape.dp
    )
    rate = traffic.requests_per_second
    one_rank = pre_s * prefill.shape.dp  # one request's prefill runs on one DP rank
    ttft_ok = None if traffic.ttft_ms is None else one_rank * 1000 <= traffic.ttft_ms
    one = decode_step(
        model, gpu, decode.shape, 1, traffic.mean_context, decode.decode.per_gpu
    ).tpot_ms
    tpot_ok = None if traffic.tpot_ms is None else one <= traffic.tpot_ms
    if rate is None:
        return PdRatio(pre_s, dec_s, pre_s / dec_s, None, None, None, ttft_ok, tpot_ok, one)
    concurrency = rate * traffic.output_tokens * decode.decode.step_expected_s
    return PdRatio(
        pre_s, dec_s, pre_s / dec_s,
        prefill_instances=max(1, math.ceil(rate * pre_s / 0.8)),  # keep prefill 80% busy
        decode_instances=max(1, math.ceil(rate * dec_s)), decode_concurrency=concurrency,
        ttft_ok=ttft_ok, tpot_ok=tpot_ok, batch1_tpot_ms=one,
    )


def plan_capacity(
    spec: Spec, model: ModelConfig, gpu: GpuType, traffic: Traffic, shapes: dict[str, Shape],
    used: int = 0,
) -> CapacityPlan:
    """Capacity plan for `spec` on `gpu`. `shapes` maps each role to its Shape (see
    `pdctl.capacity.spec_shape`); phases 0/1 plan `serve`, phases 2/3 `prefill` and `decode`.
    `used`: bytes other processes hold on the GPU (a preflight recording's most used GPU)."""
    roles: tuple[RolePlan, ...]
    per_node = gpus_per_host(spec) or 8

    def one(role: str, section: Any) -> RolePlan:
        nodes = getattr(section, "nodes", 1) or 1
        return role_plan(
            model, gpu, role, section, shapes[role], traffic, used, per_node * nodes,
            connector_buffer(spec, role),
        )

    if not spec.disaggregated:
        roles = (one("serve", spec.serve),)
        pre = dec = roles[0]
    else:
        pre = one("prefill", spec.prefill)
        dec = one("decode", spec.decode)
        roles = (pre, dec)
    pd = _pd(model, gpu, pre, dec, traffic)
    advice = _advice(model, gpu, spec, dec, traffic, pd)
    unfit = tuple(r.role for r in roles if not r.fits)
    if unfit:
        advice = unfit_advice(unfit)
    notes = tuple(n for r in roles for n in refusal_notes(r.role, r.memory))
    notes += tuple(n for r in roles for n in beside_notes(r.role, r.memory))
    notes += tuple(n for r in roles for n in used_memory_notes(r.role, r.memory, r.shape.engine))
    notes += offload_notes(spec) + offload_cache_notes(spec, roles) + speculative_notes(spec, model)
    notes += pull_notes(spec, model)
    return CapacityPlan(model, gpu, spec.phase, traffic, roles, pd, advice, warnings=notes)


def _advice(
    model: ModelConfig, gpu: GpuType, spec: Spec, dec: RolePlan, traffic: Traffic, pd: PdRatio
) -> Advice:
    """The packing advice for the decode role, in the table's own figures: the KV batch is the
    role's (on a whole GPU for a HAMi slice, which is what packing is measured against), the
    batch worth running is the roofline ridge (or what --tpot-ms allows), and --max-num-seqs
    is the role's own."""
    if pd.tpot_ok is False and traffic.tpot_ms is not None:
        where = f"{a_gpu(gpu.name)} (TP {dec.shape.tp})"
        return unmet_tpot_advice(traffic.tpot_ms, pd.batch1_tpot_ms, where)
    if dec.slice is None:
        total, kv_batch = dec.memory.total, dec.memory.kv_sequences(traffic.context)
    else:
        total = gpu.usable_bytes
        whole = instance_memory(model, total, DEFAULT_UTIL, dec.shape)
        kv_batch = whole.kv_sequences(traffic.context)
    seqs = dec.shape.batching(total, dec.memory.max_model_len)[1]
    if traffic.tpot_ms is None:
        target = ridge_batch(model, gpu, dec.shape)
        why = "the roofline ridge: the GPU turns compute-bound there"
    else:
        cap = max(kv_batch, seqs, 1)
        target = best_batch(model, gpu, dec.shape, traffic.mean_context, cap, traffic.tpot_ms)
        why = f"the largest batch whose step meets --tpot-ms {traffic.tpot_ms:g}"
    share = getattr(spec.decode, "share", None) if spec.decode is not None else None
    per_gpu = share.per_gpu if share is not None else 1
    demand = None
    if pd.decode_concurrency is not None:  # per decode instance on whole GPUs
        demand = pd.decode_concurrency / max(1, math.ceil(dec.replicas / per_gpu))
    return packing_advice(kv_batch, target, demand, per_gpu, seqs, why, dec.slice is not None)
