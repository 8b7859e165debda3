"""Does every role of a spec fit on its GPU: the lines `validate` and `render` warn with.

Pure: the caller reads the model's config.json and picks the GPU (see
`pdctl.inputs.capacity_warnings`, which `validate` calls and `render` should call).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pdctl.capacity import adapt_traffic, spec_model_config, spec_shape, spec_traffic
from pdctl.capacity.gpus import GIB, GpuType, a_gpu
from pdctl.capacity.memory import beside_notes
from pdctl.capacity.report import plan_capacity

if TYPE_CHECKING:
    from pdctl.capacity.report import CapacityPlan, RolePlan
    from pdctl.spec.model import Spec


def role_problem(role: RolePlan, gpu: GpuType) -> str | None:
    """One line for a role that does not fit (None when it fits): what, and the nearest fit."""
    if role.fits:
        return None
    m = role.memory
    if m.refused:
        return f"{role.role}: {m.refused}"
    if m.fits_budget:  # beside_short: the engine starts; its P2pNccl buffer then overflows the GPU
        return beside_notes(role.role, m)[0]
    where = f"a {role.slice.slice_mib:,} MiB HAMi slice" if role.slice else a_gpu(gpu.name)
    text = (
        f"{role.role}: does not fit on {where} at --gpu-memory-utilization "
        f"{role.util:.2f}: KV cache holds {m.kv_tokens:,} tokens, one "
        f"{m.max_model_len:,}-token sequence needs {m.kv_per_sequence / GIB:.2f} GiB "
        f"(KV memory {m.kv_available / GIB:.2f} GiB); vLLM would refuse to start"
    )
    if role.alternatives:
        text += "; nearest that fits: " + " or ".join(a.change for a in role.alternatives[:2])
    else:
        text += "; nothing near fits: use a larger GPU or a smaller model"
    return text


def plan_problems(plan: CapacityPlan) -> tuple[str, ...]:
    """The problem line of every role of a capacity plan that does not fit."""
    return tuple(p for r in plan.roles if (p := role_problem(r, plan.gpu)) is not None)


def does_not_fit(spec: Spec, hf_config: dict[str, Any] | None, gpu: GpuType) -> tuple[str, ...]:
    """Problem lines for `spec` on `gpu` (empty when every role fits). Raises SpecError when
    the model is unknown (callers that only warn catch it)."""
    model = spec_model_config(spec.model, hf_config)
    roles = spec.roles
    shapes = {role: spec_shape(spec, role) for role in roles}
    traffic, _ = adapt_traffic(spec_traffic(spec), spec, model, shapes)
    return plan_problems(plan_capacity(spec, model, gpu, traffic, shapes))
