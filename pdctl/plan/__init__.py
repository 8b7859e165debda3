"""The plan layer: spec (+ optional facts) -> Plan. Every decision lives here; no I/O."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from pdctl.compat import release as release_for
from pdctl.errors import SpecError, UsageError
from pdctl.plan.firewall import group_ports
from pdctl.plan.group import group_kinds
from pdctl.plan.lora import check_lora
from pdctl.plan.model import Instance, Plan, SecretEnv, TargetName, Unit
from pdctl.plan.parallel import check_parallel
from pdctl.plan.peers import check_loopback_peers
from pdctl.plan.place import Chooser, first_free
from pdctl.plan.serve import serve_instances
from pdctl.plan.transport import check_hosts, check_leaders
from pdctl.plan.units import host_units
from pdctl.spec.model import Spec

if TYPE_CHECKING:  # facts load only where a recording is given (plan.topology)
    from pdctl.plan.parallel import Dims
    from pdctl.preflight.facts import ClusterFacts

__all__ = ["Instance", "Plan", "SecretEnv", "Unit", "make_plan", "target_of"]


def target_of(spec: Spec, phase: int, target: str | None = None) -> TargetName:
    """The target: `target` (the command line's --target) over the spec's, else by phase."""
    chosen = target or spec.target
    if chosen is None:
        if phase == 0:
            chosen = "hosts"
        elif phase in (2, 3):
            chosen = "hosts" if spec.hosts else "kubernetes"
        else:
            chosen = "kubernetes"
    wrong = None
    if phase == 0 and chosen != "hosts":
        wrong, fix = "phase 0 runs on hosts only", "use phase 1 for Kubernetes"
    elif phase == 1 and chosen != "kubernetes":
        wrong, fix = "phase 1 runs on Kubernetes only", "use phase 0 or 2 for hosts"
    if wrong is None:
        return chosen  # type: ignore[return-value]
    if target is not None:
        raise UsageError(f"--target {target}: {wrong}", fix=fix)
    raise SpecError(f"{wrong} (target: {chosen})", path="target", fix=f"drop `target`, or {fix}")


def secret_envs(spec: Spec) -> tuple[SecretEnv, ...]:
    out = []
    for ref, exported in (
        (spec.secrets.hf_token, "HF_TOKEN"), (spec.secrets.api_key, "VLLM_API_KEY"),
    ):
        if ref is None:
            continue
        default = f"{spec.name}-{exported.lower().replace('_', '-')}"
        out.append(SecretEnv(exported, ref.env, ref.secret_name or default, ref.secret_key))
    return tuple(out)


def make_plan(
    spec: Spec, phase: int | None = None, target: str | None = None, choose: Chooser = first_free,
    cluster: ClusterFacts | None = None, dims: Dims | None = None, scaled: bool = False,
) -> Plan:
    """Decide everything. `phase`/`target` override the spec's; `choose` picks GPU sets;
    `cluster` (a recording; by default the facts a TopologyChooser holds) bounds GPUs per pod;
    `dims` (the model's heads, layers, experts) turns on the parallelism checks; `scaled`:
    the count of `pdctl scale` (one engine behind the router is a scaled-down deployment)."""
    phase = spec.phase if phase is None else phase
    tgt = target_of(spec, phase, target)
    check_parallel(spec, phase, dims)
    check_lora(spec, tgt)
    rel = release_for(spec.engine.version)
    plan = Plan(
        spec=spec, phase=phase, target=tgt, release=rel, image=spec.engine.image or rel.image,
        instances=(), secrets=secret_envs(spec),
        served_name=spec.model.served_name or spec.model.name,
    )
    if phase in (0, 1):
        plan = replace(plan, instances=serve_instances(spec, rel, phase, tgt, choose))
        if tgt == "hosts":
            from pdctl.plan.guard import guard_ports

            plan = replace(plan, instances=guard_ports(spec, plan.instances))
        if phase == 0 and "router" in spec.model_fields_set:  # the front door (plan/router.py)
            from pdctl.plan.router import front_door

            plan = replace(plan, services=front_door(plan, scaled))
        plan = replace(plan, kinds=group_kinds(plan), ports=group_ports(plan))
    else:
        plan = pd_plan(plan, choose)
        if phase == 3:
            from pdctl.plan.slice import slice_notes

            plan = replace(plan, notes=slice_notes(spec.decode))
    if plan.on_kubernetes:
        # Each phase's and target's steps load where they run (a cold `pdctl render`).
        from pdctl.plan.kube_checks import check_kube, pod_settings
        from pdctl.plan.parallel import pin_notes
        from pdctl.plan.transport import check_kube as check_transport

        plan = replace(plan, pods=pod_settings(spec, phase))
        if cluster is None:  # a TopologyChooser's recording
            cluster = getattr(getattr(choose, "facts", None), "cluster", None)
        check_kube(plan, cluster)
        check_transport(plan)
        plan = replace(plan, notes=plan.notes + pin_notes(spec, phase))
    else:
        check_loopback_peers(plan)
        from pdctl.plan import mooncake_tcp
        from pdctl.plan.kv import mooncake_cautions

        dis = spec.disaggregation if phase >= 2 else None
        plan = replace(plan, cautions=check_hosts(plan) + check_leaders(plan) + mooncake_cautions(
            dis, rel.version) + mooncake_tcp.cautions(dis, spec))
    return replace(plan, units=host_units(plan))


def pd_plan(plan: Plan, choose: Chooser) -> Plan:
    """Phases 2 and 3, stage by stage: the shape, the engines (placement, KV config, ports,
    environment), then on hosts the router and mooncake_master, the firewall list and the
    libraries Mooncake needs; on Kubernetes the slice (phase 3) and the custom resources."""
    from pdctl.plan.firewall import port_rules
    from pdctl.plan.group import refuse_kube_groups
    from pdctl.plan.kv import require_connectors
    from pdctl.plan.llmd import check_llmd, custom_kinds, kube_instances
    from pdctl.plan.pd import host_instances
    from pdctl.plan.router import mooncake_libraries, plan_services
    from pdctl.plan.shape import pd_shape
    from pdctl.plan.slice import plan_slice

    spec, rel = plan.spec, plan.release
    shape = pd_shape(spec, plan.phase)
    require_connectors(shape.dis, rel)
    if plan.on_kubernetes:
        refuse_kube_groups(spec)
        gateway_pods = check_llmd(spec, plan.phase, shape)
        sl = plan_slice(spec.decode) if plan.phase == 3 and spec.decode is not None else None
        insts = kube_instances(spec, rel, plan.phase, shape, sl)
        kinds = custom_kinds(spec)
        return replace(
            plan, shape=shape, instances=insts, slice=sl, kinds=kinds, gateway_pods=gateway_pods
        )
    sl = plan_slice(spec.decode) if plan.phase == 3 and spec.decode is not None else None
    from pdctl.plan.guard import guard_ports

    insts = guard_ports(spec, host_instances(spec, rel, shape, choose, sl))
    plan = replace(plan, shape=shape, instances=insts, slice=sl)
    plan = replace(plan, services=plan_services(plan))
    hosts = {h.name: h for h in plan.spec.hosts}
    libraries = tuple((n, mooncake_libraries(plan, h)) for n, h in hosts.items())
    return replace(plan, ports=port_rules(plan), libraries=tuple(x for x in libraries if x[1]))
