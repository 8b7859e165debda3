"""Capacity planning for vLLM, in closed form: does the model fit, how much KV cache, which
memory fraction, how many decode slices per GPU, how fast (roofline), what P:D ratio.

Everything here is pure: no files, environment, clock or network. Callers pass the model's
HF `config.json` as a dict (the CLI reads the file), GPU figures come from `find_gpu`.
Sizes are bytes (int) unless a name ends in `_mib`. Docs: docs/capacity.md.

Stable public API (other modules call these; signatures only grow keyword arguments):

    model = model_config(name, hf_config=None, params_billion=None)   # ModelConfig
    model = spec_model_config(spec.model, hf_config=None)   # the same, from the spec
    gpu = find_gpu("H200")   # GpuType; SpecError if unknown

    shape = Shape(tp=2, pp=1, dtype="auto", kv_cache_dtype="fp8", max_model_len=8192,
                  gpu="H100-SXM", engine="0.33.0")
    # max_num_seqs / max_num_batched_tokens None = vLLM's defaults for that GPU; `gpu` also
    # picks NVLink or PCIe all-reduce buffers and the MLA block; `engine` the profiler's rules
    shape = spec_shape(spec, "serve" | "prefill" | "decode")              # Shape from the spec
    gpu, origin = spec_gpu(spec, name=None, memory_gib=None)   # origin ASSUMED: none named
    traffic = spec_traffic(spec, prompt=None, output=None)     # report.Traffic, options win

    fit = model_fit(model, shape)            # ModelFit: for preflight, no GPU needed
    fit.weights          # weight bytes on one GPU (heaviest PP stage, split over TP)
    fit.kv_per_token     # KV bytes per token on one GPU
    fit.kv_per_sequence  # KV bytes of one max_model_len sequence on one GPU
    fit.need_bytes       # weights + overheads + one sequence: the least total x util

    mem = instance_memory(model, gpu.usable_bytes, util, shape)   # InstanceMemory
    mem.kv_available, mem.kv_tokens, mem.concurrency, mem.fits, mem.min_util

    sl = decode_slice(model, gpu.memory_mib, shape, per_gpu=2, percent=None, mib=None)
    sl.slice_mib                 # HAMi `nvidia.com/gpumem` for one decode instance
    sl.gpu_memory_utilization    # the --gpu-memory-utilization to pass inside the slice
    sl.min_slice_mib, sl.max_per_gpu, sl.kv_tokens, sl.fits
    slice_util(slice_mib)        # util inside any slice size

    weights_bytes_per_gpu(model, tp, pp, dtype); kv_bytes_per_token(model, tp, pp, kv, dtype)
    smallest_fit(model, total_bytes, shape, util, max_tp=16) -> Shape | None
    alternatives(model, total_bytes, shape, util, max_tp=16) -> tuple[Alternative, ...]
    verdict.does_not_fit(spec, hf_config, gpu) -> tuple[str, ...]   # validate/render warnings
    fromlog.parse_log(text) -> Observed; fromlog.compare(plan, observed) -> dict
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The public names and the module that defines each, listed here only (__all__ adds this
# file's own). They are imported when first used (PEP 562 `__getattr__`): `validate`/`render`
# read only the model table (capacity.models and capacity.params, for the parallelism checks)
# and should not load the memory model with it.
_FROM = {
    "pdctl.capacity.fit": (
        "Alternative", "ModelFit", "Shape", "alternatives", "instance_memory", "model_fit",
        "smallest_fit",
    ),
    "pdctl.capacity.gpus": ("GPUS", "GpuType", "custom_gpu", "find_gpu"),
    "pdctl.capacity.memory": (
        "DEFAULT_UTIL", "InstanceMemory", "Overhead", "kv_bytes_per_token", "weights_bytes_per_gpu",
    ),
    "pdctl.capacity.models": ("BUILTIN", "ModelConfig"), "pdctl.capacity.params": ("model_config",),
    "pdctl.capacity.profile": ("PINNED",),
    "pdctl.capacity.slice": ("DecodeSlice", "decode_slice", "slice_util"),
}
_MODULE_OF = {name: module for module, names in _FROM.items() for name in names}

if TYPE_CHECKING:  # the types this file's own functions name (the names above are Any to mypy)
    from pdctl.capacity.fit import Shape
    from pdctl.capacity.gpus import GpuType
    from pdctl.capacity.models import ModelConfig
    from pdctl.capacity.report import Traffic
    from pdctl.spec.model import Model, Spec


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'pdctl.capacity' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once
    return value


def spec_model_config(model: Model, hf_config: dict[str, Any] | None = None) -> ModelConfig:
    """ModelConfig for the spec's `model` section: `hf_config` (the parsed `model.config`
    file, read by the caller), else the built-in table by `model.name`; `model.paramsBillion`
    overrides the parameter count. SpecError (path `model.name`) when nothing is known."""
    from pdctl.capacity.params import model_config

    return model_config(model.name, hf_config, model.params_billion)


def spec_shape(spec: Spec, role: str = "serve") -> Shape:
    """The Shape of one role of the spec: `serve` (phases 0/1), `prefill` or `decode`."""
    from pdctl.capacity.fit import Shape
    from pdctl.capacity.profile import PINNED, async_scheduling

    # a missing section (None) gives every getattr its default
    section: Any = {"serve": spec.serve, "prefill": spec.prefill, "decode": spec.decode}[role]
    tp, dp = getattr(section, "tensor_parallel", 1), getattr(section, "data_parallel", 1)
    engine = getattr(getattr(spec, "engine", None), "version", None) or PINNED
    return Shape(
        tp=tp, pp=getattr(section, "pipeline_parallel", 1), dtype=spec.model.dtype,
        # Expert parallel shards the experts over every TP x DP rank (docs/multinode.md).
        ep=tp * dp if getattr(section, "expert_parallel", False) else 0, dp=dp,
        kv_cache_dtype=spec.model.kv_cache_dtype, max_model_len=spec.model.max_model_len,
        max_num_seqs=getattr(section, "max_num_seqs", None),
        max_num_batched_tokens=getattr(section, "max_num_batched_tokens", None),
        enforce_eager=getattr(section, "enforce_eager", False), engine=engine,
        lora=lora_shape(spec.model, None), speculative=getattr(section, "speculative", None),
        async_scheduling=async_scheduling(engine, getattr(section, "pipeline_parallel", 1), (
            *(getattr(section, "extra_args", ()) or ()),
            *(getattr(getattr(spec, "engine", None), "extra_args", ()) or ()))),
    )


def lora_shape(model: Model, config: ModelConfig | None) -> Any:
    """The spec's LoRA limits as a capacity LoraShape (None without `model.lora`); with the
    model's config, the largest declared adapter's weights (for the host-memory figure)."""
    from pdctl.capacity.lora import LoraShape, adapter_bytes
    from pdctl.capacity.memory import dtype_bytes

    lora = model.lora
    if lora is None:
        return None
    size = 0
    if config is not None:
        width = dtype_bytes(model.dtype, config)
        size = max(
            (
                adapter_bytes(config, a.rank or lora.max_lora_rank, a.target_modules, width)
                for a in lora.adapters
            ),
            default=adapter_bytes(config, lora.max_lora_rank, (), width),
        )
    return LoraShape(lora.max_loras, lora.max_lora_rank, lora.max_cpu_loras or lora.max_loras, size)


# spec_gpu's origin when neither the command's options nor the spec name a GPU
ASSUMED = "assumed: pass --gpu"

_GPU_PATHS = {"hardware.gpu": "hardware.gpu", "decode.share.gpuType": "decode.share.gpuType"}


def spec_gpu(
    spec: Any, name: str | None = None, memory_gib: float | None = None
) -> tuple[GpuType, str]:
    """The GPU and where it came from: `name`/`memory_gib` (the command's --gpu and
    --gpu-memory-gib) win, else the spec (hardware.gpu, hardware.gpuMemoryGib,
    decode.share.gpuType), else an H100-SXM with origin ASSUMED. An unknown name is a
    UsageError for --gpu, a SpecError at the spec's field otherwise."""
    from pdctl.capacity.gpus import GPUS, custom_gpu, find_gpu
    from pdctl.errors import SpecError, UsageError

    hardware = getattr(spec, "hardware", None)
    share = getattr(spec.decode, "share", None) if spec.decode is not None else None
    origin = "--gpu"
    if name is None and hardware is not None and hardware.gpu:
        name, origin = hardware.gpu, "hardware.gpu"
    if memory_gib is None and hardware is not None:
        memory_gib = hardware.gpu_memory_gib
    if share is not None and share.gpu_type:
        sized = _share_gpu(share)
        if name is None:
            name, origin = share.gpu_type, "decode.share.gpuType"
            if sized is not None and memory_gib is None:
                return sized, origin  # the size of an ambiguous type that gpuTotalMib names
    if name is not None:
        try:
            gpu = find_gpu(name)  # an ambiguous name ('A100'): the smaller (gpus.ambiguous)
        except SpecError as exc:
            if memory_gib:  # a GPU pdctl does not know, of the memory given: speed borrowed
                return custom_gpu(memory_gib, name=name), origin
            known = ", ".join(GPUS)
            if origin == "--gpu":
                fix = f"use one of {known}, or give its memory (--gpu-memory-gib)"
                raise UsageError(f"--gpu: {exc.message}", fix=fix) from None
            fix = (
                f"use one of {known}, or give its memory in hardware.gpuMemoryGib "
                "(or --gpu-memory-gib)"
            )
            raise SpecError(exc.message, path=_GPU_PATHS[origin], fix=fix) from None
        return (custom_gpu(memory_gib, gpu) if memory_gib else gpu), origin
    if memory_gib:
        flag = hardware is None or hardware.gpu_memory_gib != memory_gib
        return custom_gpu(memory_gib), "--gpu-memory-gib" if flag else "hardware.gpuMemoryGib"
    return find_gpu("H100-SXM"), ASSUMED


# HAMi's gpuTotalMib may differ from the table's memory by what a driver reports (a few
# hundred MiB); further than this, it is another GPU.
TOTAL_TOLERANCE = 0.03


def _share_gpu(share: Any) -> GpuType | None:
    """Check decode.share against its gpuType: gpuTotalMib must be that GPU's memory (within
    3%) and a gpuMemoryMib slice no larger than it. Returns the GPU of an ambiguous type
    ('A100': 40 or 80 GB) that gpuTotalMib picks, else None. SpecError at the field."""
    from pdctl.capacity.gpus import candidates
    from pdctl.errors import SpecError

    known = candidates(share.gpu_type)
    if not known:
        return None  # a type filter pdctl does not know (spec_gpu says so where it matters)
    sizes = " or ".join(f"{g.name} {g.memory_mib:,} MiB" for g in known)
    total = share.gpu_total_mib
    match = None
    if total is not None:
        match = next(
            (g for g in known if abs(total - g.memory_mib) <= TOTAL_TOLERANCE * g.memory_mib),
            None,
        )
        if match is None:
            raise SpecError(
                f"gpuTotalMib {total:,} MiB is not the memory of gpuType {share.gpu_type!r} "
                f"({sizes})",
                path="decode.share.gpuTotalMib",
                fix=f"set gpuTotalMib to {known[-1].memory_mib} (nvidia-smi's memory.total), "
                "or gpuType to the GPU you have",
            )
    most = match.memory_mib if match is not None else max(g.memory_mib for g in known)
    if share.gpu_memory_mib is not None and share.gpu_memory_mib > most:
        raise SpecError(
            f"a {share.gpu_memory_mib:,} MiB slice is larger than gpuType "
            f"{share.gpu_type!r} ({sizes})",
            path="decode.share.gpuMemoryMib",
            fix=f"use at most {most // share.per_gpu} MiB per slice ({share.per_gpu} per GPU), "
            "or gpuType to the GPU you have",
        )
    return match if match is not None and len(known) > 1 else None


def spec_traffic(
    spec: Any, prompt: int | None = None, output: int | None = None, rate: float | None = None,
    ttft: float | None = None, tpot: float | None = None,
) -> Traffic:
    """The spec's `workload` as a report.Traffic; each figure given here wins over it."""
    from pdctl.capacity.report import Traffic

    w = getattr(spec, "workload", None)
    base = (
        Traffic()
        if w is None
        else Traffic(w.prompt_tokens, w.output_tokens, w.requests_per_second, w.ttft_ms, w.tpot_ms)
    )
    return Traffic(
        prompt if prompt is not None else base.prompt_tokens,
        output if output is not None else base.output_tokens,
        rate if rate is not None else base.requests_per_second,
        ttft if ttft is not None else base.ttft_ms, tpot if tpot is not None else base.tpot_ms,
    )


def adapt_traffic(
    traffic: Traffic, spec: Any, model: ModelConfig, shapes: dict[str, Shape],
    prompt: int | None = None, output: int | None = None,
) -> tuple[Traffic, tuple[str, ...]]:
    """The default prompt (1,024) and output (256) lengths shrunk to fit maxModelLen, and a
    note saying so; `prompt`/`output`: the command's options. Only lengths the user wrote
    (options or workload.*) stay as they are, for the caller to refuse when too long."""
    from dataclasses import replace

    length = min(shape.model_len(model) for shape in shapes.values())
    if traffic.context <= length or length < 2:
        return traffic, ()
    written: set[str] = getattr(getattr(spec, "workload", None), "model_fields_set", set())
    own_prompt = prompt is not None or "prompt_tokens" in written
    own_output = output is not None or "output_tokens" in written
    if own_prompt and own_output:
        return traffic, ()
    if own_prompt:
        new = replace(traffic, output_tokens=length - traffic.prompt_tokens)
    elif own_output:
        new = replace(traffic, prompt_tokens=length - traffic.output_tokens)
    else:
        out = max(1, length // 5)  # the default's 4:1 prompt:output
        new = replace(traffic, prompt_tokens=length - out, output_tokens=out)
    if new.prompt_tokens < 1 or new.output_tokens < 1:
        return traffic, ()
    return new, (
        f"workload: the default request ({traffic.prompt_tokens:,} prompt + "
        f"{traffic.output_tokens:,} output tokens) is longer than maxModelLen {length:,}; "
        f"planned with {new.prompt_tokens:,} + {new.output_tokens:,} (set workload.promptTokens "
        "and workload.outputTokens to plan your own)",
    )


__all__ = [
    *_MODULE_OF, "ASSUMED", "adapt_traffic", "spec_gpu", "spec_model_config", "spec_shape",
    "spec_traffic",
]
