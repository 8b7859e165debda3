"""Built-in GPU table: memory, memory bandwidth and dense BF16 tensor throughput."""

from __future__ import annotations

from dataclasses import dataclass

from pdctl.errors import SpecError

MIB = 1024**2
GIB = 1024**3


@dataclass(frozen=True)
class GpuType:
    """One GPU model.

    `memory_mib` is the total nvidia-smi / NVML reports. `usable_mib` is what CUDA reports as
    total (`cudaMemGetInfo`, what vLLM multiplies by `--gpu-memory-utilization`): a few hundred
    MiB less, kept by the driver. `bandwidth_gbs` is HBM/GDDR bandwidth in GB/s (1e9 B/s),
    `bf16_tflops` dense BF16 tensor throughput (no sparsity) in TFLOP/s.
    """

    name: str
    memory_mib: int
    usable_mib: int
    bandwidth_gbs: float
    bf16_tflops: float
    source: str = ""

    @property
    def usable_bytes(self) -> int:
        return self.usable_mib * MIB

    @property
    def ridge(self) -> float:
        """FLOP per byte where compute and bandwidth limits meet (roofline ridge point)."""
        return self.bf16_tflops * 1e12 / (self.bandwidth_gbs * 1e9)


# usable_mib: CUDA's total where measured or shown in a vLLM log (`total_gpu_memory`):
# H100 79.22 GiB (vllm PR #10511), H200 143155.94 MiB (torch.cuda.mem_get_info on our H200),
# A100 40GB 39.38 GiB (vllm #16570). Else the driver keeps about 512 MiB (438-635 seen).
RESERVED_MIB = 512


def _usable(total_mib: int) -> int:
    return total_mib - RESERVED_MIB


GPUS: dict[str, GpuType] = {
    g.name: g
    for g in (
        GpuType("H100-SXM", 81559, 81121, 3350, 989.4, "NVIDIA H100 datasheet; vLLM log 79.22 GiB"),
        GpuType("H100-PCIe", 81559, 81121, 2000, 756.0, "NVIDIA H100 datasheet (PCIe)"),
        GpuType("H200", 143771, 143155, 4800, 989.4, "NVIDIA H200 datasheet; measured CUDA total"),
        GpuType("A100-80GB", 81920, _usable(81920), 2039, 312.0, "NVIDIA A100 datasheet (SXM)"),
        GpuType(
            "A100-40GB",
            40960,
            40325,
            1555,
            312.0,
            "NVIDIA A100 datasheet; vLLM log 39.38 GiB",
        ),
        GpuType("L40S", 46068, _usable(46068), 864, 362.0, "NVIDIA L40S datasheet"),
        GpuType("L4", 23034, _usable(23034), 300, 121.0, "NVIDIA L4 datasheet"),
        GpuType("A10G", 23028, _usable(23028), 600, 70.0, "AWS G5 (A10G) figures"),
        GpuType("RTX-4090", 24564, _usable(24564), 1008, 165.2, "NVIDIA Ada whitepaper"),
        GpuType(
            "RTX-3090",
            24576,
            24145,
            936,
            71.0,
            "NVIDIA Ampere whitepaper; vLLM log 23.58 GiB",
        ),
        GpuType("RTX-4060", 8188, _usable(8188), 272, 60.0, "NVIDIA Ada whitepaper"),
    )
}

_ALIASES = {
    "h100": "H100-SXM",
    "h100sxm": "H100-SXM",
    "h10080gbhbm3": "H100-SXM",
    "h100pcie": "H100-PCIe",
    "h200": "H200",
    "h200sxm": "H200",
    "h200nvl": "H200",
    "a100": "A100-40GB",  # two memory sizes: the smaller, with a warning (`ambiguous`)
    "a100sxm": "A100-40GB",
    "a100sxm4": "A100-40GB",
    "a100pcie": "A100-40GB",
    "a100pcie80gb": "A100-80GB",
    "a10080gb": "A100-80GB",
    "a100sxm480gb": "A100-80GB",
    "a100sxm80gb": "A100-80GB",
    "a10040gb": "A100-40GB",
    "a100sxm440gb": "A100-40GB",
    "a100pcie40gb": "A100-40GB",
    "l40s": "L40S",
    "l4": "L4",
    "a10g": "A10G",
    "rtx4090": "RTX-4090",
    "4090": "RTX-4090",
    "geforcertx4090": "RTX-4090",
    "rtx3090": "RTX-3090",
    "3090": "RTX-3090",
    "rtx4060": "RTX-4060",
}


def _key(name: str) -> str:
    text = name.lower().replace("nvidia", "")
    return "".join(ch for ch in text if ch.isalnum())


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


# Names that do not say the memory, of GPUs sold with two sizes: the plan takes the smaller
# (a plan that fits the smaller card fits the larger) and says so.
_SIZES = {
    "a100": ("A100-40GB", "A100-80GB"),
    "a100sxm": ("A100-40GB", "A100-80GB"),
    "a100sxm4": ("A100-40GB", "A100-80GB"),
    "a100pcie": ("A100-40GB", "A100-80GB"),
}


def ambiguous(name: str) -> str:
    """'' or a warning when `name` fits GPUs of more than one memory size ('A100')."""
    sizes = _SIZES.get(_key(name))
    if not sizes:
        return ""
    return (
        f"GPU {name!r} comes in {' and '.join(sizes)}: planned for the smaller, {sizes[0]}; "
        f"name the one you have ({', '.join(sizes)})"
    )


def custom_gpu(memory_gib: float, base: GpuType | None = None) -> GpuType:
    """A GPU with the given memory; speed figures from `base` (default H100-SXM)."""
    ref = base or GPUS["H100-SXM"]
    mib = int(memory_gib * 1024)
    return GpuType(
        f"{ref.name} ({memory_gib:g} GiB)" if base else f"{memory_gib:g} GiB GPU",
        mib,
        _usable(mib),
        ref.bandwidth_gbs,
        ref.bf16_tflops,
        "given memory",
    )


def gpu_notes(gpu: GpuType, assumed: bool = False) -> tuple[str, ...]:
    """Warnings about what the plan assumed of the GPU (shown in plan's table and JSON)."""
    if assumed:
        return (
            f"no GPU given: planned for an {gpu.name} ({gpu.memory_mib:,} MiB); "
            "pass --gpu or set hardware.gpu",
        )
    if gpu.source == "given memory":
        return (
            f"GPU not in pdctl's table: CUDA total assumed {gpu.usable_mib:,} MiB "
            f"({RESERVED_MIB} MiB below the {gpu.memory_mib:,} MiB given) and speed "
            "figures borrowed from "
            + (gpu.name.split(" (")[0] if "(" in gpu.name else "H100-SXM")
            + "; name a known GPU (hardware.gpu) for exact figures",
        )
    return ()
