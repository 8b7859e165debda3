"""The plan layer: spec (+ optional facts) -> Plan. Every decision lives here; no I/O."""

from __future__ import annotations

from pdctl.compat import release as release_for
from pdctl.errors import SpecError, UsageError
from pdctl.plan.model import Instance, Plan, SecretEnv, Target
from pdctl.plan.place import Chooser, first_free
from pdctl.plan.serve import serve_instances
from pdctl.plan.slice import slice_notes
from pdctl.spec.model import Spec

__all__ = ["Instance", "Plan", "SecretEnv", "make_plan", "target_of"]


def target_of(spec: Spec, phase: int, target: str | None = None) -> Target:
    """The target: `target` (the command line's --target) over the spec's, else by phase."""
    chosen = target or spec.target
    if chosen is None:
        if phase == 0:
            chosen = "hosts"
        elif phase == 2:
            chosen = "hosts" if spec.hosts else "kubernetes"
        else:
            chosen = "kubernetes"
    wrong = None
    if phase == 0 and chosen != "hosts":
        wrong, fix = "phase 0 runs on hosts only", "use phase 1 for Kubernetes"
    elif phase in (1, 3) and chosen != "kubernetes":
        wrong, fix = f"phase {phase} runs on Kubernetes only", "use phase 0 or 2 for hosts"
    if wrong is None:
        return chosen  # type: ignore[return-value]
    if target is not None:
        raise UsageError(f"--target {target}: {wrong}", fix=fix)
    raise SpecError(f"{wrong} (target: {chosen})", path="target", fix=f"drop `target`, or {fix}")


def secret_envs(spec: Spec) -> tuple[SecretEnv, ...]:
    out = []
    for ref, exported in (
        (spec.secrets.hf_token, "HF_TOKEN"),
        (spec.secrets.api_key, "VLLM_API_KEY"),
    ):
        if ref is None:
            continue
        default = f"{spec.name}-{exported.lower().replace('_', '-')}"
        out.append(SecretEnv(exported, ref.env, ref.secret_name or default, ref.secret_key))
    return tuple(out)


def make_plan(
    spec: Spec,
    phase: int | None = None,
    target: str | None = None,
    choose: Chooser = first_free,
) -> Plan:
    """Decide everything. `phase`/`target` override the spec's; `choose` picks GPU sets."""
    phase = spec.phase if phase is None else phase
    tgt = target_of(spec, phase, target)
    rel = release_for(spec.engine.version)
    image = spec.engine.image or rel.image
    if phase in (0, 1):
        instances = serve_instances(spec, rel, phase, tgt, choose)
    else:
        from pdctl.plan.pd import pd_instances

        instances = pd_instances(spec, rel, phase, tgt, choose)
    return Plan(
        spec=spec,
        phase=phase,
        target=tgt,
        release=rel,
        image=image,
        instances=instances,
        secrets=secret_envs(spec),
        served_name=spec.model.served_name or spec.model.name,
        notes=slice_notes(spec.decode) if phase == 3 else (),
    )
