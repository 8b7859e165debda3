"""Hosts over SSH (phases 0 and 2): processes or `docker run` started by rendered scripts.

`open_target` opens HostsTarget (target.py); CAPABILITIES is what it can do beyond the
common verbs. The helpers take the SSH connections (Fleet, fleet.py), not the target."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdctl.targets.base import Capabilities

if TYPE_CHECKING:
    from pdctl.plan.model import Plan
    from pdctl.render.bundle import Bundle
    from pdctl.targets.base import Connect, Say, StageFn, Target

CAPABILITIES = Capabilities(
    kind="hosts", named="SSH hosts", keep_going=True,
    undo="undone unit by unit (--keep-going: the others go on)", sends_secrets=True, partial=True,
    commands=True, restarts=True,
)


def open_target(plan: Plan, bundle: Bundle, options: Connect, say: Say, stage: StageFn) -> Target:
    from pdctl.targets.hosts.target import HostsTarget

    return HostsTarget(plan, bundle, options.ssh, parallel=options.parallel, say=say, stage=stage)
