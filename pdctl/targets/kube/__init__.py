"""A Kubernetes cluster (phases 1 to 3): server-side apply, prune, rollout wait, delete.

`open_target` opens KubeTarget (target.py), a KubeApi (api.py: the REST face every helper
takes) with the Target verbs; CAPABILITIES is what it can do beyond the common verbs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdctl.targets.base import Capabilities

if TYPE_CHECKING:
    from pdctl.plan.model import Plan
    from pdctl.render.bundle import Bundle
    from pdctl.targets.base import Connect, Say, StageFn, Target

CAPABILITIES = Capabilities(
    kind="kubernetes", named="Kubernetes", server_dry_run=True,
    undo="not undone (the cluster keeps the previous pods serving)", down_timeout=True,
    volumes=True, confirm_down=True,
)


def open_target(plan: Plan, bundle: Bundle, options: Connect, say: Say, stage: StageFn) -> Target:
    from pdctl.targets.kube.api import api_client
    from pdctl.targets.kube.target import KubeTarget

    return KubeTarget(
        api_client(options.kubeconfig, options.context), plan.name, plan.spec.kubernetes.namespace,
        say=say, stage=stage, objects=list(bundle.objects), plan=plan,
    )
