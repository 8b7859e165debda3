"""Model fit per instance: weights / TP + overheads + KV of one max-length sequence must fit
in GPU (or HAMi slice) memory x --gpu-memory-utilization. Numbers from pdctl.capacity."""

from __future__ import annotations

from typing import Any

from pdctl.capacity import (
    DEFAULT_UTIL,
    model_fit,
    spec_model_config,
    spec_shape,
    weights_bytes_per_gpu,
)
from pdctl.capacity.slice import slice_util
from pdctl.errors import SpecError
from pdctl.plan.model import Instance, Plan
from pdctl.preflight.facts import Facts
from pdctl.preflight.finding import Finding, PlanCheck, gib

MIB = 1024 * 1024


def model_of(plan: Plan, hf_config: dict[str, Any] | None) -> tuple[Any, str]:
    """(ModelConfig, '') or (None, why unknown)."""
    try:
        return spec_model_config(plan.spec.model, hf_config), ""
    except SpecError as exc:
        return None, exc.message


def weights_total(plan: Plan, model: Any) -> int:
    return weights_bytes_per_gpu(model, 1, 1, plan.spec.model.dtype)


def _section(plan: Plan, role: str) -> Any:
    spec = plan.spec
    return {"serve": spec.serve, "prefill": spec.prefill, "decode": spec.decode}.get(role)


def _memory(plan: Plan, facts: Facts, inst: Instance) -> tuple[int, str]:
    """(MiB per GPU or slice, what it is) for one instance; (0, why) when unknown."""
    if inst.host is not None:
        hf = facts.host(inst.host.name)
        if hf is None or not hf.gpus:
            return 0, "GPU memory not gathered"
        sizes = [g.memory_mib for g in hf.gpus if g.index in inst.gpus]
        if not sizes:
            return 0, "planned GPUs not on the host"
        sl = plan.slice if plan.phase == 3 and inst.role == "decode" else None
        if sl is not None and sl.size_mib:  # phase 3 on hosts: HAMi-core caps the engine
            size = min(sl.size_mib, min(sizes))
            return size, f"HAMi slice {size} MiB of a {min(sizes)} MiB GPU"
        return min(sizes), f"GPU {min(sizes)} MiB"
    cluster = facts.cluster
    if cluster is None:
        return 0, "cluster not gathered"
    sizes = [n.gpu_memory_mib for n in cluster.nodes if n.gpu_memory_mib]
    sizes += [d.devmem for n in cluster.nodes for d in n.hami_devices or () if d.devmem]
    if not sizes:
        return 0, "no GPU memory label (nvidia.com/gpu.memory) or HAMi registration on nodes"
    gpu_mib = max(sizes)
    share = getattr(_section(plan, "decode"), "share", None)
    if plan.phase == 3 and inst.role == "decode" and share is not None:
        from pdctl.capacity.slice import slice_size

        size = slice_size(gpu_mib, share.per_gpu, share.gpu_memory_percent, share.gpu_memory_mib)
        return size, f"HAMi slice {size} MiB of a {gpu_mib} MiB GPU"
    return gpu_mib, f"GPU {gpu_mib} MiB"


def fit(plan: Plan, facts: Facts, model: Any, why: str) -> list[Finding]:
    if plan.spec.engine.device == "cpu":
        return []
    if model is None:
        return [Finding("WARN", "model.fit", plan.name, f"model size unknown: {why}",
                        "weights + KV of one sequence within GPU memory",
                        "set model.config (a config.json) or model.paramsBillion")]

    out = []
    for inst in plan.instances:
        if inst.gpu_count == 0 and not inst.gpus:
            continue
        role = inst.role if _section(plan, inst.role) is not None else "serve"
        shape = spec_shape(plan.spec, role)
        need = model_fit(model, shape)
        mib, what = _memory(plan, facts, inst)
        section = _section(plan, role)
        where = f"{inst.host.name}/{inst.name}" if inst.host is not None else inst.name
        want = (f"{gib(need.need_bytes, 'B')}/GPU: weights {gib(need.weights, 'B')} + "
                f"overhead {gib(need.overhead, 'B')} + KV of one {need.max_model_len}-token "
                f"sequence {gib(need.kv_per_sequence, 'B')}")
        if not mib:
            out.append(Finding("WARN", "model.fit", where, what, want))
            continue
        util = getattr(section, "gpu_memory_utilization", None)
        if util is None:
            util = slice_util(mib) if what.startswith("HAMi") else DEFAULT_UTIL
        have = int(mib * MIB * util)
        found = f"{what} x {util:g} = {gib(have, 'B')}"
        if need.need_bytes > have:
            out.append(Finding("FAIL", "model.fit", where, found, want,
                               "raise tensorParallel, lower model.maxModelLen, set "
                               "model.kvCacheDtype: fp8, or raise gpuMemoryUtilization"))
        else:
            out.append(Finding("PASS", "model.fit", where, found, want))
    return out


def check(c: PlanCheck) -> list[Finding]:
    return fit(c.plan, c.facts, c.model, c.why)
