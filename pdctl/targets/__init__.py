"""Where bundles run: one package per target (hosts/, docker/, kube/), each with the same
verbs behind the Target protocol (base.py) and its CAPABILITIES as data. `open_target` routes
a plan to its package (as SkyPilot's sky/provision routes verbs to per-cloud packages);
`capabilities` answers what that target can do without connecting."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

    from pdctl.plan.model import Plan
    from pdctl.render.bundle import Bundle
    from pdctl.targets.base import Capabilities, Connect, Say, StageFn, Target


def package(plan: Plan, options: Connect) -> ModuleType:
    """The target package of `plan`: Kubernetes, Docker engines (with docker URLs) or SSH
    hosts."""
    if plan.target == "kubernetes":
        from pdctl.targets import kube

        return kube
    if options.docker_urls:
        from pdctl.targets import docker

        return docker
    from pdctl.targets import hosts

    return hosts


def capabilities(plan: Plan, options: Connect) -> Capabilities:
    """What the target of `plan` can do (pdctl.targets.base.Capabilities); connects nowhere."""
    caps: Capabilities = package(plan, options).CAPABILITIES
    return caps


def open_target(
    plan: Plan, bundle: Bundle, options: Connect, say: Say | None = None,
    stage: StageFn | None = None,
) -> Target:
    """The target of `plan`, from its package. Checks its options (every docker URL, the
    kubeconfig) before anything connects. `say` gets each step, `stage` where each instance
    is while the target waits for it."""
    target: Target = package(plan, options).open_target(
        plan, bundle, options, say or (lambda _m: None), stage or (lambda _s: None)
    )
    return target
