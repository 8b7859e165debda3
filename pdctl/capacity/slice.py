"""Phase 3: the HAMi slice a decode instance needs, slices per GPU, util inside the slice.

Inside a HAMi slice CUDA reports the slice as the GPU's total, so vLLM's
`--gpu-memory-utilization` is a fraction of the slice. The fraction is the one render passes
(`pdctl.hami.slice_utilization`: the slice minus 768 MiB for the CUDA context as HAMi-core
counts it, 1536 MiB for CUDA graphs unless eager, 512 MiB per extra TP rank; at most 0.95), so
the plan and the rendered flags agree. Slices under 24 GiB run eager by default (as render
does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from pdctl.capacity.fit import Alternative, Shape, instance_memory, model_fit
from pdctl.capacity.gpus import MIB
from pdctl.capacity.models import ModelConfig
from pdctl.errors import SpecError
from pdctl.hami import SMALL_SLICE_MIB, slice_utilization

SLICE_STEP_MIB = 256


def slice_util(slice_mib: int, tensor_parallel: int = 1, enforce_eager: bool = False) -> float:
    """--gpu-memory-utilization inside a slice of `slice_mib` (render's formula); 0.0 when the
    slice is too small to leave vLLM half of itself."""
    try:
        return slice_utilization(slice_mib, tensor_parallel, enforce_eager)
    except SpecError:
        return 0.0


def eager_in(slice_mib: int, shape: Shape, share_eager: bool | None = None) -> bool:
    """Whether the decode instance in this slice runs eager (no CUDA graphs), as render decides."""
    if shape.enforce_eager:
        return True
    if share_eager is not None:
        return share_eager
    return slice_mib < SMALL_SLICE_MIB


def slice_for(model: ModelConfig, shape: Shape, share_eager: bool | None = None) -> int:
    """Smallest slice (MiB, a multiple of 256) that holds weights, overheads and one
    max-length sequence at the slice's own util."""
    mib = SLICE_STEP_MIB
    need = model_fit(model, replace(shape, enforce_eager=True)).need_bytes
    mib = max(mib, math.ceil(need / MIB / 0.9 / SLICE_STEP_MIB) * SLICE_STEP_MIB)
    for _ in range(4096):
        eager = eager_in(mib, shape, share_eager)
        fit = model_fit(model, replace(shape, enforce_eager=eager))
        if mib * MIB * slice_util(mib, shape.tp, eager) >= fit.need_bytes:
            return mib
        mib += SLICE_STEP_MIB
    return mib


@dataclass(frozen=True)
class DecodeSlice:
    """One decode instance on a HAMi slice (per GPU of the instance when TP > 1).

    slice_mib: the slice (`nvidia.com/gpumem`); per_gpu: slices on one physical GPU;
    gpu_memory_utilization: the flag value inside the slice; enforce_eager: CUDA graphs off;
    kv_tokens / concurrency: KV capacity in the slice (concurrency = max-length sequences);
    min_slice_mib: the smallest slice that holds weights, overheads and one max-length
    sequence; max_per_gpu: how many such minimal slices one GPU holds; fits: the slice holds at
    least one max-length sequence and `per_gpu` slices fit on the GPU.
    """

    slice_mib: int
    per_gpu: int
    gpu_memory_utilization: float
    enforce_eager: bool
    kv_tokens: int
    concurrency: float
    min_slice_mib: int
    max_per_gpu: int
    gpu_mib: int

    @property
    def fits(self) -> bool:
        return (
            self.slice_mib >= self.min_slice_mib
            and self.gpu_memory_utilization > 0
            and self.slice_mib * self.per_gpu <= self.gpu_mib
        )


def slice_size(
    gpu_mib: int, per_gpu: int = 2, percent: int | None = None, mib: int | None = None
) -> int:
    """The slice in MiB from the spec's share: `mib`, else `percent` of the GPU, else 1/per_gpu.

    HAMi computes a percentage of the memory NVML reports (the whole GPU, `gpu_mib`).
    """
    if mib is not None:
        return mib
    pct = percent if percent is not None else 100 // per_gpu
    return gpu_mib * pct // 100


def decode_slice(
    model: ModelConfig, gpu_mib: int, shape: Shape, per_gpu: int = 2, percent: int | None = None,
    mib: int | None = None, share_eager: bool | None = None, util: float | None = None,
) -> DecodeSlice:
    """Size, util and KV capacity of a decode instance on a slice of a `gpu_mib` GPU.

    `util` overrides the computed fraction (the spec's decode.gpuMemoryUtilization)."""
    size = slice_size(gpu_mib, per_gpu, percent, mib)
    eager = eager_in(size, shape, share_eager)
    fraction = util if util is not None else slice_util(size, shape.tp, eager)
    mem = instance_memory(model, size * MIB, fraction, replace(shape, enforce_eager=eager))
    minimum = slice_for(model, shape, share_eager)
    return DecodeSlice(
        slice_mib=size, per_gpu=per_gpu, gpu_memory_utilization=fraction, enforce_eager=eager,
        kv_tokens=mem.kv_tokens, concurrency=round(mem.concurrency, 2), min_slice_mib=minimum,
        max_per_gpu=gpu_mib // minimum if minimum else 0, gpu_mib=gpu_mib,
    )


def slice_alternatives(
    model: ModelConfig, shape: Shape, sl: DecodeSlice | None, share: Any
) -> tuple[Alternative, ...]:
    """For a HAMi slice that does not fit: fewer slices per GPU, or a larger slice, each one
    that holds weights, overheads and one max-length sequence AND fits the GPU with the
    others (the same `DecodeSlice.fits` rule the plan applies)."""
    if sl is None or sl.fits:
        return ()
    eager = getattr(share, "enforce_eager", None)
    out: list[Alternative] = []
    for per_gpu in range(sl.per_gpu - 1, 0, -1):
        cand = decode_slice(model, sl.gpu_mib, shape, per_gpu, None, None, eager)
        if cand.fits:
            out.append(
                Alternative(
                    f"decode.share.perGpu {per_gpu} ({cand.slice_mib:,} MiB slices, "
                    "without gpuMemoryPercent/gpuMemoryMib)",
                    replace(shape, enforce_eager=cand.enforce_eager), cand.kv_tokens,
                    cand.gpu_memory_utilization, (("perGpu", per_gpu),),
                )
            )
            break
    need = sl.min_slice_mib
    if need * sl.per_gpu <= sl.gpu_mib:
        cand = decode_slice(model, sl.gpu_mib, shape, sl.per_gpu, None, need, eager)
        if cand.fits:
            out.append(
                Alternative(
                    f"decode.share.gpuMemoryMib {need}",
                    replace(shape, enforce_eager=cand.enforce_eager), cand.kv_tokens,
                    cand.gpu_memory_utilization, (("gpuMemoryMib", need),),
                )
            )
    return tuple(out)
