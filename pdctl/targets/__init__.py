"""Where bundles run. `open_target` opens the right Target (pdctl.targets.base) for a plan."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pdctl.plan.model import Plan
    from pdctl.render.bundle import Bundle
    from pdctl.targets.base import Connect, Say, StageFn, Target


def open_target(
    plan: Plan,
    bundle: Bundle,
    options: Connect,
    say: Say | None = None,
    stage: StageFn | None = None,
) -> Target:
    """The target of `plan`: Kubernetes, Docker engines (with docker URLs) or SSH hosts.
    Checks its options (every docker URL, the kubeconfig) before anything connects. `say`
    gets each step, `stage` where each instance is while the target waits for it."""
    say = say or (lambda _m: None)
    stage = stage or (lambda _s: None)
    if plan.target == "kubernetes":
        from pdctl.targets.kube.target import KubeTarget, api_client

        return KubeTarget(
            api_client(options.kubeconfig, options.context),
            plan.name,
            plan.spec.kubernetes.namespace,
            say=say,
            stage=stage,
            objects=list(bundle.objects),
        )
    if options.docker_urls:
        from pdctl.targets.docker.target import ContainerHosts

        return ContainerHosts(
            plan,
            bundle,
            options.docker_urls,
            options.docker_network,
            say=say,
            stage=stage,
            access=options.docker_access(),
        )
    from pdctl.targets.hosts.target import HostsTarget

    return HostsTarget(plan, bundle, options.ssh, parallel=options.parallel, say=say, stage=stage)
