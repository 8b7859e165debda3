"""HAMi slices for decode (phase 3): size, packing checks and the memory fraction vLLM gets.

Self-contained on purpose: pure functions of the spec's `decode.share`, no facts, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdctl.errors import SpecError
from pdctl.spec.pd import Decode, Share

# What vLLM must leave free inside a slice, MiB (see `slice_utilization`). Measured on an H200
# under the real HAMi-core (tests/fixtures/gpu/hami-h200/README.md): the CUDA context as HAMi-core
# counts it is 520 MiB, the whole need is ~522 MiB eager and ~1,307 MiB with CUDA graphs whatever
# the slice's size.
HAMI_CORE_MIB = 768  # the CUDA context as HAMi-core counts it (520 measured) and its own
CUDA_GRAPH_MIB = 1536  # CUDA-graph pool + allocator slack at the runtime peak (~790 measured)
NCCL_MIB_PER_RANK = 512  # NCCL buffers per extra tensor-parallel rank
# Fallback fractions when the slice's size in MiB is unknown (a percentage of an unknown GPU).
UNKNOWN_SIZE_UTILIZATION = 0.85
UNKNOWN_SIZE_UTILIZATION_EAGER = 0.9
MIN_UTILIZATION = 0.5
MAX_UTILIZATION = 0.95  # the need is fixed MiB, not a fraction: 0.96-0.98 held when measured
SMALL_SLICE_MIB = 24 * 1024  # below this, CUDA graphs are switched off by default


@dataclass(frozen=True)
class Slice:
    """One decode instance's HAMi request and the vLLM settings that follow from it."""

    memory_mib: int | None  # `nvidia.com/gpumem`, or None when sized by percent
    memory_percent: int | None  # `nvidia.com/gpumem-percentage`
    size_mib: int | None  # the slice's size in MiB when known (either way)
    cores_percent: int | None
    enforce_eager: bool
    gpu_memory_utilization: float


def slice_utilization(size_mib: int | None, tensor_parallel: int, enforce_eager: bool) -> float:
    """`--gpu-memory-utilization` for a vLLM instance inside a HAMi slice.

    Inside a slice HAMi-core makes the GPU's total memory read as the slice size, so vLLM's
    fraction applies to the slice, and whatever vLLM does not account for must fit in the rest:

        headroom_mib = 768 (the CUDA context as HAMi-core counts it)
                     + 1536 unless --enforce-eager (CUDA-graph pool, allocator slack)
                     + 512 x (tensor_parallel - 1) (NCCL buffers)
        utilization  = floor_to_0.01((size_mib - headroom_mib) / size_mib),
                       clamped to [0.5, 0.95]

    With an unknown size (a percentage of a GPU whose memory the spec does not give) the
    fraction is a conservative 0.85 (0.90 with --enforce-eager). A slice too small to leave at
    least half of itself to vLLM after the headroom is a spec error.
    """
    if size_mib is None:
        return UNKNOWN_SIZE_UTILIZATION_EAGER if enforce_eager else UNKNOWN_SIZE_UTILIZATION
    headroom = HAMI_CORE_MIB + (0 if enforce_eager else CUDA_GRAPH_MIB)
    headroom += NCCL_MIB_PER_RANK * (tensor_parallel - 1)
    fraction = math.floor((size_mib - headroom) / size_mib * 100) / 100
    if fraction < MIN_UTILIZATION:
        raise SpecError(
            f"a decode slice of {size_mib} MiB leaves less than half of itself to vLLM after "
            f"{headroom} MiB of headroom",
            path="decode.share",
            fix="give larger slices (lower perGpu, raise gpuMemoryPercent or gpuMemoryMib)",
        )
    return min(fraction, MAX_UTILIZATION)


def plan_slice(decode: Decode) -> Slice:
    """Check the packing and size one decode slice. SpecError names the field at fault."""
    share = decode.share
    if share is None:
        raise SpecError(
            "phase 3 slices decode GPUs: decode needs a `share` section",
            path="decode.share",
            fix="add `share: {perGpu: 2}` (two decode slices of 50% per GPU)",
        )
    _check_tensor_parallel(decode, share)
    percent = share.gpu_memory_percent
    if share.gpu_memory_mib is None and percent is None:
        percent = 100 // share.per_gpu
    _check_packing(share, percent)
    size = share.gpu_memory_mib
    if size is None and share.gpu_total_mib is not None and percent is not None:
        size = share.gpu_total_mib * percent // 100
    eager = decode.enforce_eager
    if not eager:
        if share.enforce_eager is not None:
            eager = share.enforce_eager
        else:
            eager = size is not None and size < SMALL_SLICE_MIB
    if decode.gpu_memory_utilization is not None:
        util = decode.gpu_memory_utilization
    else:
        util = slice_utilization(size, decode.tensor_parallel, eager)
    return Slice(
        memory_mib=share.gpu_memory_mib,
        memory_percent=None if share.gpu_memory_mib is not None else percent,
        size_mib=size,
        cores_percent=share.gpu_cores_percent,
        enforce_eager=eager,
        gpu_memory_utilization=util,
    )


def _check_tensor_parallel(decode: Decode, share: Share) -> None:
    if decode.tensor_parallel > 1 and not share.allow_tensor_parallel:
        raise SpecError(
            f"tensorParallel {decode.tensor_parallel} on HAMi slices is known to hang or crash "
            "(HAMi-core SM limits, custom all-reduce over CUDA IPC)",
            path="decode.tensorParallel",
            fix="use tensorParallel 1 for sliced decode, or set decode.share.allowTensorParallel: "
            "true (pdctl then adds --disable-custom-all-reduce)",
        )


def _check_packing(share: Share, percent: int | None) -> None:
    n = share.per_gpu
    if share.gpu_memory_mib is None and percent is not None and n * percent > 100:
        raise SpecError(
            f"{n} slices of {percent}% need {n * percent}% of one GPU's memory",
            path="decode.share.gpuMemoryPercent",
            fix=f"lower perGpu or use at most {100 // n}% per slice",
        )
    if share.gpu_memory_mib is not None and share.gpu_total_mib is not None:
        need = n * share.gpu_memory_mib
        if need > share.gpu_total_mib:
            raise SpecError(
                f"{n} slices of {share.gpu_memory_mib} MiB need {need} MiB but one GPU has "
                f"{share.gpu_total_mib} MiB",
                path="decode.share.gpuMemoryMib",
                fix=f"lower perGpu or use at most {share.gpu_total_mib // n} MiB per slice",
            )
    if share.gpu_cores_percent is not None and n * share.gpu_cores_percent > 100:
        raise SpecError(
            f"{n} slices of {share.gpu_cores_percent}% of the SMs need "
            f"{n * share.gpu_cores_percent}%",
            path="decode.share.gpuCoresPercent",
            fix=f"lower perGpu or use at most {100 // n}% per slice",
        )


def slice_notes(decode: Decode | None) -> tuple[str, ...]:
    """Warnings about a phase 3 decode share that plans but will not do what it says."""
    share = decode.share if decode is not None else None
    if share is None or share.gpu_cores_percent is None:
        return ()
    return (
        f"decode.share.gpuCoresPercent: {share.gpu_cores_percent}% is a placement hint, not a "
        "bound: HAMi-core's SM limit did not slow cuBLAS matrix products, eager or in CUDA "
        "graphs, on an H200 (tests/fixtures/gpu/hami-h200), and decode time is matrix "
        "products; only the memory of a slice is isolated (docs/phase3-hami.md)",
    )
