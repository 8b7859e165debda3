"""HAMi slices for decode (phase 3): size, packing checks and the memory fraction vLLM gets.

Pure functions of the spec's `decode.share`, no facts, no I/O; the memory formula and its
constants live in `pdctl.hami`, which capacity uses too (one formula, one set of numbers).
"""

from __future__ import annotations

from dataclasses import dataclass

from pdctl.errors import SpecError
from pdctl.hami import SMALL_SLICE_MIB, slice_utilization
from pdctl.spec.pd import Decode, Share


@dataclass(frozen=True)
class Slice:
    """One decode instance's HAMi request and the vLLM settings that follow from it."""

    memory_mib: int | None  # `nvidia.com/gpumem`, or None when sized by percent
    memory_percent: int | None  # `nvidia.com/gpumem-percentage`
    size_mib: int | None  # the slice's size in MiB when known (either way)
    cores_percent: int | None
    enforce_eager: bool
    gpu_memory_utilization: float


def plan_slice(decode: Decode) -> Slice:
    """Check the packing and size one decode slice. SpecError names the field at fault."""
    share = decode.share
    if share is None:
        raise SpecError(
            "phase 3 slices decode GPUs: decode needs a `share` section", path="decode.share",
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
        memory_percent=None if share.gpu_memory_mib is not None else percent, size_mib=size,
        cores_percent=share.gpu_cores_percent, enforce_eager=eager, gpu_memory_utilization=util,
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
