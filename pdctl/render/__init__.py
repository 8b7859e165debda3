"""The render layer: Plan -> Bundle. Pure and deterministic: same plan, same bytes."""

from __future__ import annotations

from pdctl.plan.model import Plan
from pdctl.render.bundle import Artifact, Bundle

__all__ = ["Artifact", "Bundle", "render"]


def render(plan: Plan) -> Bundle:
    if plan.target == "kubernetes":
        from pdctl.render import kube

        if plan.phase == 1:
            objs = kube.phase1_objects(plan)
        else:
            from pdctl.render.pd_kube import pd_objects

            objs = pd_objects(plan)
        return Bundle("kubernetes", tuple(kube.artifacts(plan, objs)))
    from pdctl.render import host

    if plan.phase == 0:
        units = [host.engine_unit(plan, inst) for inst in plan.instances]
        return Bundle("hosts", tuple(host.host_artifacts(plan, units)))
    from pdctl.render.pd_host import pd_host_artifacts

    return Bundle("hosts", tuple(pd_host_artifacts(plan)))
