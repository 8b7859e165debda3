"""Built-in GPU table (pdctl/data/gpus.yaml): memory, memory bandwidth, dense BF16 FLOP/s."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from pdctl.capacity import tables
from pdctl.capacity.engine import _key
from pdctl.errors import SpecError

MIB = 1024**2
GIB = 1024**3


@dataclass(frozen=True)
class GpuType:
    """One GPU model.

    `memory_mib` is the total nvidia-smi / NVML reports. `usable_mib` is what CUDA reports as
    total (`cudaMemGetInfo`, what vLLM multiplies by `--gpu-memory-utilization`): a few hundred
    MiB less, kept by the driver. `bandwidth_gbs` is HBM/GDDR bandwidth in GB/s (1e9 B/s),
    `bf16_tflops` dense BF16 tensor throughput (no sparsity) in TFLOP/s (FP16 where the GPU
    has no BF16). `compute_capability` picks vLLM's kernels for quantised weights
    (pdctl.capacity.quant); None when not known.
    """

    name: str
    memory_mib: int
    usable_mib: int
    bandwidth_gbs: float
    bf16_tflops: float
    source: str = ""
    compute_capability: int | None = None  # vLLM's to_int(): 80 A100, 89 L40S, 90 H100


    @property
    def usable_bytes(self) -> int:
        return self.usable_mib * MIB

    @property
    def ridge(self) -> float:
        """FLOP per byte where compute and bandwidth limits meet (roofline ridge point)."""
        return self.bf16_tflops * 1e12 / (self.bandwidth_gbs * 1e9)


# The driver keeps about 512 MiB of the memory CUDA does not report (438-635 seen): CUDA's
# total where pdctl/data/gpus.yaml gives no measured `usable_mib`.
RESERVED_MIB = 512


def _usable(total_mib: int) -> int:
    return total_mib - RESERVED_MIB


Number = Annotated[int | float, Field(gt=0)]  # an int stays an int (3350 GB/s)


class GpuEntry(BaseModel):
    """One entry of pdctl/data/gpus.yaml (GpuType's fields; usable_mib may be left out)."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    memory_mib: PositiveInt
    usable_mib: PositiveInt | None = None
    bandwidth_gbs: Number
    bf16_tflops: Number
    source: str
    compute_capability: PositiveInt | None = None


def load_table(
    path: Path | None = None,
) -> tuple[dict[str, GpuType], dict[str, str], dict[str, tuple[str, str]]]:
    """(name -> GpuType, alias -> name, ambiguous name -> its two sizes) of gpus.yaml."""
    where, doc = tables.read("gpus.yaml", path)
    gpus = {}
    for name, values in tables.section(where, doc, "gpus").items():
        e = tables.check(where, f"gpus.{name}", values, GpuEntry)
        usable = e.usable_mib or _usable(e.memory_mib)
        gpus[name] = GpuType(
            name, e.memory_mib, usable, e.bandwidth_gbs, e.bf16_tflops, e.source,
            e.compute_capability,
        )
    aliases = tables.section(where, doc, "aliases")
    for alias, name in aliases.items():
        tables.refer(where, f"aliases.{alias}", name, gpus)
    sizes = {}
    for name, pair in tables.section(where, doc, "sizes").items():
        if not isinstance(pair, list) or len(pair) != 2:
            raise tables.TableError(f"{where}: sizes.{name}: two GPU names expected")
        sizes[name] = (
            tables.refer(where, f"sizes.{name}", pair[0], gpus).name,
            tables.refer(where, f"sizes.{name}", pair[1], gpus).name,
        )
    return gpus, aliases, sizes


GPUS, _ALIASES, _SIZES = load_table()


def a_gpu(name: str) -> str:
    """The name after its spoken article: 'an H100', 'an L4', 'a B200'."""
    return ("an " if name[0].upper() in "AEHILR" else "a ") + name


def find_gpu(name: str) -> GpuType:
    """A GPU by name as users or nvidia-smi write it ('H200', 'NVIDIA H100 80GB HBM3', ...).

    Raises SpecError listing the known names when the name is not in the table.
    """
    key = _key(name)
    for gpu in GPUS.values():
        if _key(gpu.name) == key:
            return gpu
    if key in _ALIASES:
        return GPUS[_ALIASES[key]]
    for alias in sorted(_ALIASES, key=len, reverse=True):  # 'NVIDIA H200 141GB' -> H200
        if key.startswith(alias) and len(alias) >= 3:
            return GPUS[_ALIASES[alias]]
    raise SpecError(
        f"unknown GPU type {name!r}",
        fix=f"use one of {', '.join(GPUS)}, or give the memory (`--gpu-memory-gib`)",
    )


def ambiguous(name: str) -> str:
    """'' or a warning when `name` fits GPUs of more than one memory size ('A100')."""
    sizes = _SIZES.get(_key(name))
    if not sizes:
        return ""
    return (
        f"GPU {name!r} comes in {' and '.join(sizes)}: planned for the smaller, {sizes[0]}; "
        f"name the one you have ({', '.join(sizes)})"
    )


def candidates(name: str) -> tuple[GpuType, ...]:
    """The GPUs `name` may be: both sizes of an ambiguous name ('A100'), else the one
    find_gpu gives; () when pdctl does not know it."""
    sizes = _SIZES.get(_key(name))
    if sizes:
        return tuple(GPUS[n] for n in sizes)
    try:
        return (find_gpu(name),)
    except SpecError:
        return ()


def custom_gpu(
    memory_gib: float, base: GpuType | None = None, name: str | None = None
) -> GpuType:
    """A GPU with the given memory; speed figures from `base` (default H100-SXM). `name`: what
    the spec calls a GPU pdctl does not know ('B300'), shown with the memory."""
    ref = base or GPUS["H100-SXM"]
    mib = int(memory_gib * 1024)
    label = name or (ref.name if base else None)
    return GpuType(
        f"{label} ({memory_gib:g} GiB)" if label else f"{memory_gib:g} GiB GPU",
        mib,
        _usable(mib),
        ref.bandwidth_gbs,
        ref.bf16_tflops,
        "given memory",
        ref.compute_capability if base else None,
    )


def gpu_notes(gpu: GpuType, assumed: bool = False) -> tuple[str, ...]:
    """Warnings about what the plan assumed of the GPU (shown in plan's table and JSON)."""
    if assumed:
        return (
            f"no GPU given: planned for an {gpu.name} ({gpu.memory_mib:,} MiB); "
            "pass --gpu or set hardware.gpu",
        )
    if gpu.source == "given memory":
        base = gpu.name.split(" (")[0]
        return (
            f"GPU not in pdctl's table: CUDA total assumed {gpu.usable_mib:,} MiB "
            f"({RESERVED_MIB} MiB below the {gpu.memory_mib:,} MiB given) and speed "
            "figures borrowed from "
            + (base if base in GPUS else "H100-SXM")
            + " (extrapolated); name a known GPU (hardware.gpu) for exact figures",
        )
    return ()
