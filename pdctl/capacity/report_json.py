"""A capacity plan (pdctl.capacity.report) as plain JSON-able data: `pdctl plan --output json`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pdctl.capacity.lora import host_bytes
from pdctl.capacity.profile import flashinfer_only
from pdctl.capacity.roofline import time_slice_basis

if TYPE_CHECKING:
    from pdctl.capacity.fit import Shape
    from pdctl.capacity.report import CapacityPlan, RolePlan


def _gib(value: float) -> float:
    return round(value / 1024**3, 2)


def _shape(shape: Shape) -> dict[str, Any]:
    return {
        "tensorParallel": shape.tp, "pipelineParallel": shape.pp, "dataParallel": shape.dp,
        "expertParallel": shape.ep,  # GPUs the experts are spread over; 0: split by TP
        "kvCacheDtype": shape.kv_cache_dtype, "maxModelLen": shape.max_model_len,
        "maxNumSeqs": shape.max_num_seqs, "maxNumBatchedTokens": shape.max_num_batched_tokens,
    }


def _lora(r: RolePlan) -> dict[str, Any]:
    """With model.lora: the GPU buffers (part of the weights) and the host cache (lora.py)."""
    lo = r.shape.lora
    if lo is None:
        return {}
    return {
        "loraBuffersBytesPerGpu": r.memory.lora, "loraHostBytes": host_bytes(lo),
        "loraAdapterBytes": lo.adapter_bytes,
    }


def role_dict(r: RolePlan) -> dict[str, Any]:
    """One role as plain JSON-able data (bytes as ints, GiB rounded to 0.01)."""
    m = r.memory
    out: dict[str, Any] = {
        "role": r.role,
        "replicas": r.replicas,
        **_shape(r.shape),
        "maxModelLen": m.max_model_len,
        "pipelineStage": m.stage,  # the PP stage the memory figures are of (fewest KV tokens)
        "otherProcessesGib": _gib(m.used),
        "weightsBytesPerGpu": m.weights,
        "weightsGib": _gib(m.weights),
        **_lora(r),
        "kvBytesPerToken": m.kv_per_token,  # full-attention layers only with sliding ones
        "kvBytesPerTokenAllLayers": m.kv_per_token_all_layers,
        "kvBytesPerSequence": m.kv_per_sequence,
        "activationGib": _gib(m.overhead.activation),
        "nonTorchGib": _gib(m.overhead.non_torch),
        "cudaGraphsGib": _gib(m.overhead.cuda_graphs),
        "samplerProfile": "flashinfer"
        if flashinfer_only(r.shape.engine, r.shape.flashinfer_sampler)
        else "sorted",
        "cudaGraphsCounted": m.overhead.graphs_counted,
        "maxNumBatchedTokens": r.shape.batching(m.total, m.max_model_len)[0],
        "maxNumSeqs": r.shape.batching(m.total, m.max_model_len)[1],
        "vllmVersion": r.shape.engine,
        "slidingWindowLayers": m.layout.sliding_layers if m.layout is not None else 0,
        "totalGib": _gib(m.total),
        "gpuMemoryUtilization": r.util,
        "utilFromSpec": r.util_from_spec,
        "recommendedGpuMemoryUtilization": r.recommended_util,
        "minGpuMemoryUtilization": m.min_util,
        "kvAvailableGib": _gib(m.kv_available),
        # vLLM's "GPU KV cache size: N tokens" (concurrency at maxModelLen x maxModelLen),
        # per DP rank: each has its own cache
        "kvTokens": m.kv_tokens,
        "kvTokensPerInstance": m.kv_tokens * r.shape.dp,
        # tokens the cache stores at once (below kvTokens where sliding windows cut long
        # sequences), per DP rank
        "kvTokenSlots": m.kv_token_slots,
        "concurrencyAtMaxModelLen": round(m.concurrency, 2),
        "fits": r.fits,
        "smallestFit": {**_shape(r.smallest), "gpuMemoryUtilization": r.smallest_util}
        if r.smallest
        else None,
        "alternatives": [
            {
                "change": a.change,
                **_shape(a.shape),
                "gpuMemoryUtilization": a.util,
                "share": dict(a.share) or None,
                "kvTokens": a.kv_tokens,
            }
            for a in r.alternatives
        ],
        # A role that does not fit has no speed figures (its KV is zero): null.
        "decode": None
        if not r.fits
        else {
            "batch": r.batch, "context": r.decode.context,
            "stepMsBound": round(r.decode.step_bound_s * 1000, 3),
            "stepMsExpected": round(r.decode.step_expected_s * 1000, 3),
            "tokensPerSecond": round(r.decode.tokens_per_s * r.shape.dp, 1),
            "tokensPerSecondBound": round(r.decode.tokens_per_s_bound * r.shape.dp, 1),
            # co-located instances (HAMi slices) time-slicing one GPU
            "instancesPerGpu": r.decode.per_gpu,
            "tokensPerSecondPerGpu": round(
                r.decode.tokens_per_s * r.decode.per_gpu / (r.shape.tp * r.shape.pp), 1
            ),
            # where each figure comes from: measured, modelled or assumed
            "basis": {
                "step": "modelled (roofline; bandwidth efficiency measured on an H200)",
                "timeSlicing": None
                if r.decode.per_gpu == 1
                else time_slice_basis(r.decode.per_gpu),
                "prefillMfu": "assumed",
            },
        },
        "prefillTokensPerSecond": round(r.prefill_tokens_per_s, 1) if r.fits else None,
    }
    if r.slice is not None:
        s = r.slice
        out["slice"] = {
            "sliceMib": s.slice_mib, "perGpu": s.per_gpu,
            "gpuMemoryUtilization": s.gpu_memory_utilization, "enforceEager": s.enforce_eager,
            "minSliceMib": s.min_slice_mib, "maxPerGpu": s.max_per_gpu, "kvTokens": s.kv_tokens,
            "concurrency": s.concurrency, "fits": s.fits,
        }
    return out


def plan_dict(plan: CapacityPlan) -> dict[str, Any]:
    """The whole plan as plain JSON-able data (what `pdctl plan --output json` prints)."""
    model, gpu, pd = plan.model, plan.gpu, plan.pd
    return {
        "model": {
            "name": model.name, "paramsBillion": round(model.params / 1e9, 2),
            "activeParamsBillion": round(model.active_params / 1e9, 2), "layers": model.layers,
            "kvHeads": model.kv_heads, "headDim": model.head_dim, "mlaLatent": model.mla_latent,
            "experts": model.experts, "quantization": model.quantization,
            "source": "table"
            if model.from_table
            else (
                f"paramsBillion, shapes of {model.shapes_from}" if model.shapes_from else "config"
            ),
        },
        "gpu": {
            "name": gpu.name, "memoryMib": gpu.memory_mib, "usableMib": gpu.usable_mib,
            "bandwidthGBs": gpu.bandwidth_gbs, "bf16Tflops": gpu.bf16_tflops,
        },
        "phase": plan.phase,
        "traffic": {
            "promptTokens": plan.traffic.prompt_tokens, "outputTokens": plan.traffic.output_tokens,
            "requestsPerSecond": plan.traffic.requests_per_second, "ttftMs": plan.traffic.ttft_ms,
            "tpotMs": plan.traffic.tpot_ms,
        },
        "roles": [role_dict(r) for r in plan.roles],
        # No P:D while a role does not fit (the advice says what it needs instead).
        "pd": None
        if not plan.fits
        else {
            # phases 0/1: one instance prefills and decodes, so no P:D ratio
            "prefillPerDecode": round(pd.prefill_per_decode, 3) if plan.disaggregated else None,
            "prefillSecondsPerRequest": round(pd.prefill_s_per_request, 4),
            "decodeSecondsPerRequest": round(pd.decode_s_per_request, 4),
            "prefillInstances": pd.prefill_instances if plan.disaggregated else None,
            "decodeInstances": pd.decode_instances if plan.disaggregated else None,
            "decodeConcurrency": None
            if pd.decode_concurrency is None
            else round(pd.decode_concurrency, 1),
            "ttftOk": pd.ttft_ok,
            "tpotOk": pd.tpot_ok,
            "batch1TpotMs": round(pd.batch1_tpot_ms, 3),
        },
        "advice": {
            "case": plan.advice.case, "pack": plan.advice.pack, "lines": list(plan.advice.lines),
        },
        "fits": plan.fits, "warnings": list(plan.warnings),
    }
