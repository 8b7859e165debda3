"""The render layer: Plan -> Bundle. Pure and deterministic: same plan, same bytes."""

from __future__ import annotations

from pdctl.plan.model import Plan
from pdctl.render.bundle import Artifact, Bundle, UnitFiles, apply_rank

__all__ = ["Artifact", "Bundle", "UnitFiles", "render"]


def render(plan: Plan) -> Bundle:
    if plan.on_kubernetes:
        from pdctl.render import kube

        if plan.phase == 1 and any(i.workers for i in plan.instances):
            from pdctl.render.lws import phase1_group  # multi-node: a LeaderWorkerSet

            objs = phase1_group(plan)
        elif plan.phase == 1:
            from pdctl.render.kube_pod import phase1_objects

            objs = phase1_objects(plan)
        else:
            from pdctl.render.pd_kube import pd_objects

            objs = pd_objects(plan)
        if plan.spec.autoscaling is not None:  # per-role HPA / KEDA ScaledObject
            from pdctl.render.kube_autoscale import autoscale_objects

            objs += autoscale_objects(plan, objs)
        mirror = plan.spec.kubernetes.image_mirror
        if mirror is not None:  # every image pulled from a registry mirror (docs/offline.md)
            from pdctl.render.mirror import mirrored, rewrite

            objs = rewrite(objs, lambda ref: mirrored(ref, mirror))
        ordered = sorted(objs, key=lambda o: apply_rank(o["kind"]))
        return Bundle("kubernetes", tuple(kube.artifacts(plan, objs)), objects=tuple(ordered))
    if plan.spec.autoscaling is not None:  # run by `pdctl autoscale`: checked here as on k8s
        from pdctl.render.kube_autoscale import check_on_hosts

        check_on_hosts(plan)
    from pdctl.render import host
    from pdctl.render.host_scripts import host_scripts

    if plan.phase == 0:
        engines = [host.with_setup(plan, u) for u in plan.units if u.role == "serve"]
        units = host.render_units(plan, engines)
        loose: list[Artifact] = []
        routers = [u for u in plan.units if u.role == "router"]
        if plan.ports or routers:  # multi-node groups, the router: ports.md; the router's files
            from pdctl.render.pd_host import group_ports_doc, service_files

            units += [service_files(plan, u) for u in routers]
            loose = group_ports_doc(plan, units)
    else:
        from pdctl.render.pd_host import pd_host_units

        units, loose = pd_host_units(plan)
    files = tuple(a for u in units for a in u.files) + tuple(loose)
    return Bundle("hosts", files, units=tuple(units), scripts=host_scripts())
