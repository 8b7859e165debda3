"""Docker hosts through the docker SDK (`--docker-url HOST=URL`): the bundle's containers
(render/container.py, what start.sh runs over SSH), found again by their pdctl labels.

`open_target` opens ContainerHosts (target.py), one Engine (engine.py) per host over the
transport transport.py checks; CAPABILITIES is what it can do beyond the common verbs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdctl.targets.base import Capabilities

if TYPE_CHECKING:
    from pdctl.plan.model import Plan
    from pdctl.render.bundle import Bundle
    from pdctl.targets.base import Connect, Say, StageFn, Target

CAPABILITIES = Capabilities(
    kind="docker", named="--docker-url", undo="undone as a whole (its containers are removed)",
    sends_secrets=True, restarts=True,
)


def open_target(plan: Plan, bundle: Bundle, options: Connect, say: Say, stage: StageFn) -> Target:
    from pdctl.targets.docker.target import ContainerHosts

    return ContainerHosts(
        plan, bundle, options.docker_urls, say=say, stage=stage, access=options.docker_access(),
    )
