"""Phase 3: the HAMi slice a decode instance needs, slices per GPU, util inside the slice.

Inside a HAMi slice CUDA reports the slice as the GPU's total, so vLLM's
`--gpu-memory-utilization` is a fraction of the slice. We leave `SLICE_HEADROOM_MIB` of the
slice unused (HAMi-core's own ~300 MiB plus the CUDA context, which is used before vLLM's
free-memory check) and never go above `SLICE_MAX_UTIL` (vLLM's CUDA-graph profiling can
overshoot a slice's cap: vllm#40937).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdctl.capacity.fit import Shape, instance_memory, model_fit
from pdctl.capacity.gpus import MIB
from pdctl.capacity.models import ModelConfig

SLICE_HEADROOM_MIB = 1024
SLICE_MAX_UTIL = 0.90
SLICE_STEP_MIB = 256


def slice_util(slice_mib: int) -> float:
    """--gpu-memory-utilization inside a slice of `slice_mib`: (slice - headroom) / slice,
    rounded down to 0.01, at most SLICE_MAX_UTIL."""
    if slice_mib <= SLICE_HEADROOM_MIB:
        return 0.0
    return min(SLICE_MAX_UTIL, math.floor((slice_mib - SLICE_HEADROOM_MIB) / slice_mib * 100) / 100)


def slice_for(need_bytes: int) -> int:
    """Smallest slice (MiB, a multiple of 256) whose `slice_util` share holds `need_bytes`."""
    need_mib = need_bytes / MIB
    mib = max(need_mib / SLICE_MAX_UTIL, need_mib + SLICE_HEADROOM_MIB)
    mib = math.ceil(mib / SLICE_STEP_MIB) * SLICE_STEP_MIB
    while int(mib * MIB * slice_util(mib)) < need_bytes:  # rounding of the util: step up
        mib += SLICE_STEP_MIB
    return mib


@dataclass(frozen=True)
class DecodeSlice:
    """One decode instance on a HAMi slice (per GPU of the instance when TP > 1).

    slice_mib: the slice (`nvidia.com/gpumem`); per_gpu: slices on one physical GPU;
    gpu_memory_utilization: the flag value inside the slice; kv_tokens / concurrency: KV
    capacity in the slice (concurrency = max-length sequences); min_slice_mib: the smallest
    slice that holds weights, overheads and one max-length sequence; max_per_gpu: how many
    such minimal slices one GPU holds; fits: the slice holds at least one max-length
    sequence and `per_gpu` slices fit on the GPU.
    """

    slice_mib: int
    per_gpu: int
    gpu_memory_utilization: float
    kv_tokens: int
    concurrency: float
    min_slice_mib: int
    max_per_gpu: int
    gpu_mib: int

    @property
    def fits(self) -> bool:
        return (self.slice_mib >= self.min_slice_mib
                and self.slice_mib * self.per_gpu <= self.gpu_mib)


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
    model: ModelConfig,
    gpu_mib: int,
    shape: Shape,
    per_gpu: int = 2,
    percent: int | None = None,
    mib: int | None = None,
) -> DecodeSlice:
    """Size, util and KV capacity of a decode instance on a slice of a `gpu_mib` GPU."""
    size = slice_size(gpu_mib, per_gpu, percent, mib)
    util = slice_util(size)
    mem = instance_memory(model, size * MIB, util, shape)
    minimum = slice_for(model_fit(model, shape).need_bytes)
    return DecodeSlice(
        slice_mib=size,
        per_gpu=per_gpu,
        gpu_memory_utilization=util,
        kv_tokens=mem.kv_tokens,
        concurrency=round(mem.concurrency, 2),
        min_slice_mib=minimum,
        max_per_gpu=gpu_mib // minimum if minimum else 0,
        gpu_mib=gpu_mib,
    )
