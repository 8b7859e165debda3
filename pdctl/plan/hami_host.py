"""Phase 3 on hosts: decode instances packed on a host's GPUs under HAMi-core, no Kubernetes.

Each decode engine runs with HAMi-core preloaded (`LD_PRELOAD`), a memory cap of the slice size
`plan_slice` computes (the same formula as on Kubernetes, pdctl.hami), an SM limit when
`gpuCoresPercent` is set, and a shared-cache file of its own: HAMi-core accounts every process
that opens one cache file as one container, so two slices sharing a file would share one cap.
Pure: the spec and the slice in, placement slots and environment pairs out.
"""

from __future__ import annotations

import math
from dataclasses import replace

from pdctl.errors import SpecError
from pdctl.plan.place import Group, Slot
from pdctl.plan.slice import Slice
from pdctl.spec.model import Host, Spec

# Where HAMi-core takes its lock (src/utils.c `unified_lock`); the start script creates it.
LOCK_DIR = "/tmp/vgpulock"
CACHE_FILE = "vgpu.cache"
# The variables a bare-metal slice sets, and the spec field behind each.
SLICE_ENV = {
    "LD_PRELOAD": "decode.share.library",
    "CUDA_DEVICE_MEMORY_LIMIT": "decode.share (the slice size)",
    "CUDA_DEVICE_SM_LIMIT": "decode.share.gpuCoresPercent",
    "CUDA_DEVICE_MEMORY_SHARED_CACHE": "the instance's folder (one cache file per slice)",
}


def check_host_slice(spec: Spec, sl: Slice) -> str:
    """The library path, or SpecError: hosts need it and a slice size in MiB (there is no
    device plugin to turn a percentage into MiB)."""
    share = spec.decode.share if spec.decode is not None else None
    assert share is not None
    if spec.engine.device == "cpu":
        raise SpecError(
            "phase 3 slices GPUs with HAMi-core, and engine.device cpu has none",
            path="engine.device", fix="use phase 2 for CPU engines, or engine.device: cuda",
        )
    if share.library is None:
        raise SpecError(
            "phase 3 on hosts preloads HAMi-core into each decode engine, and no library path "
            "is given",
            path="decode.share.library",
            fix="set decode.share.library to libvgpu.so on the decode hosts (e.g. "
            "/usr/local/vgpu/libvgpu.so; build it with HAMi-core's build.sh)",
        )
    if sl.size_mib is None:
        raise SpecError(
            "phase 3 on hosts caps each slice in MiB (CUDA_DEVICE_MEMORY_LIMIT) and the GPU's "
            "memory is unknown",
            path="decode.share.gpuTotalMib",
            fix="set decode.share.gpuTotalMib (e.g. 143771 for an H200) or gpuMemoryMib",
        )
    return share.library


def decode_gpu_sets(replicas: int, per_gpu: int) -> int:
    """How many GPU sets (tensorParallel GPUs each) hold `replicas` slices, `per_gpu` a set."""
    return math.ceil(replicas / per_gpu)


def pack(slots: list[Slot], replicas: int, per_gpu: int, base_port: int) -> list[Slot]:
    """Decode slots placed one per GPU set -> up to `per_gpu` slots on each set (the same GPUs),
    `replicas` in all, numbered in order; decode ports on a host follow one another."""
    out: list[Slot] = []
    index = 0
    ports: dict[str, int] = {}
    for slot in slots:
        if slot.role != "decode":
            out.append(slot)
            continue
        for _ in range(per_gpu):
            if index == replicas:
                break
            k = ports.get(slot.host.name, 0)
            ports[slot.host.name] = k + 1
            out.append(Slot("decode", index, slot.host, slot.gpus, base_port + k))
            index += 1
    return out


def cache_path(spec: Spec, host: Host, name: str) -> str:
    """The instance's own HAMi-core shared cache, in its unit folder on the host."""
    return f"{host.data_dir.rstrip('/')}/{spec.name}/{name}/{CACHE_FILE}"


def slice_env(spec: Spec, host: Host, name: str, sl: Slice, library: str) -> list[tuple[str, str]]:
    """HAMi-core's variables for one decode slice (CUDA_VISIBLE_DEVICES comes from placement)."""
    assert sl.size_mib is not None
    pairs = [
        ("LD_PRELOAD", library), ("CUDA_DEVICE_MEMORY_LIMIT", f"{sl.size_mib}m"),
        ("CUDA_DEVICE_MEMORY_SHARED_CACHE", cache_path(spec, host, name)),
    ]
    if sl.cores_percent is not None:
        pairs.append(("CUDA_DEVICE_SM_LIMIT", str(sl.cores_percent)))
    return pairs


def slice_groups(groups: list[Group], per_gpu: int) -> list[Group]:
    """The placement groups with decode counted in GPU sets (perGpu slices share one)."""
    if per_gpu == 1:
        return groups
    return [
        replace(g, replicas=decode_gpu_sets(g.replicas, per_gpu)) if g.role == "decode" else g
        for g in groups
    ]


def slice_engine(
    spec: Spec, host: Host, name: str, role: str, tensor_parallel: int, sl: Slice | None
) -> tuple[list[tuple[str, str]], dict]:
    """A decode engine's slice: its environment pairs and role_args overrides (none for
    prefill, or without a slice)."""
    if sl is None or role != "decode":
        return [], {}
    library = check_host_slice(spec, sl)
    over: dict = {"gpu_memory_utilization": sl.gpu_memory_utilization}
    over["enforce_eager"] = sl.enforce_eager
    if tensor_parallel > 1:
        over["switches"] = ("--disable-custom-all-reduce",)
    return slice_env(spec, host, name, sl, library), over
