"""HAMi slices: how much of a slice vLLM may take. The one formula and its measured constants,
used by the plan (the flags it renders) and by capacity (the slice it sizes). Imports nothing
of pdctl's but errors, so every layer may use it."""

from __future__ import annotations

import math

from pdctl.errors import SpecError

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
