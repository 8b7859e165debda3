"""`pdctl down --dry-run`: what `down` would stop and delete, found by connecting and reading
only (nothing is stopped, deleted or written); and the confirmation `down` asks on Kubernetes.

Like `down`, the preview does not give up on the hosts it reaches when one cannot be
reached: it lists what each reachable host would lose, names the unreachable ones with the
instances the spec puts there, and then fails (exit 1)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pdctl.errors import PdctlError

if TYPE_CHECKING:
    from pdctl.plan.model import Plan
    from pdctl.render.bundle import Bundle
    from pdctl.targets.base import Connect


@dataclass
class Preview:
    """(where, what) `down` would stop or delete, (where, what) it would keep, on hosts
    (host, folder) the deployment folders it would remove, and the hosts it could not reach
    (host -> why) with the spec's instances on each (host -> units)."""

    kind: str
    removed: list[tuple[str, str]] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)
    folders: list[tuple[str, str]] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)
    left: dict[str, list[str]] = field(default_factory=dict)

    def lines(self) -> Iterator[str]:
        """The preview, a line at a time; after the last one, when a host could not be
        reached, the PdctlError (exit 1) that names it."""
        verb = "delete" if self.kind == "kubernetes" else "stop"
        yield from (f"would {verb} {what} ({where})" for where, what in self.removed)
        for where, what in self.kept:
            yield f"would keep {what} ({where}); --delete-volumes removes it"
        yield from (f"would remove the folder {folder} on {host}" for host, folder in self.folders)
        if not self.removed:
            if self.unreachable:
                yield "nothing runs on the hosts reached: nothing to stop there"
            else:
                yield "nothing runs: nothing to stop" if verb == "stop" else "nothing to delete"
        left = []
        for host, why in self.unreachable.items():
            units = ", ".join(self.left.get(host, [])) or "-"
            yield f"cannot look on {host}: {units} may run there ({why})"
            left.append(f"{host} ({units})")
        if left:
            raise PdctlError(
                f"down --dry-run could not reach {'; '.join(left)}: `down` would stop what "
                "runs on the other hosts and leave these; run it again when the host answers"
            )


def preview(plan: Plan, bundle: Bundle, options: Connect, delete_volumes: bool = False) -> Preview:
    """Connect and list what `down` would remove; changes nothing. SSH hosts that cannot be
    reached (or are lost meanwhile) are recorded, as `down` records them."""
    from pdctl.actions import kind_of
    from pdctl.render.host import deploy_dir
    from pdctl.targets import open_target

    kind = kind_of(plan, options)
    found = Preview(kind)
    with open_target(plan, bundle, options) as target:
        if kind == "kubernetes":
            from pdctl.targets.kube.target import KEPT_KINDS

            namespace = plan.spec.kubernetes.namespace
            for res, name in target.owned_objects():  # type: ignore[attr-defined]
                keep = (res.group, res.kind) in KEPT_KINDS and not delete_volumes
                (found.kept if keep else found.removed).append((namespace, f"{res.kind}/{name}"))
            return found
        from pdctl.targets.hosts.target import HostsTarget

        if isinstance(target, HostsTarget):  # SSH hosts: the unreachable ones are recorded
            from pdctl.targets.state import diff

            target.connect(tolerate=True)
            changes = diff(target.desired(), target.observed(tolerate=True))
            found.unreachable = dict(sorted(target.unreachable.items()))
            found.left = {host: target.left_on(host) for host in found.unreachable}
        else:
            changes = target.changes()
        # What runs there now: every unit observed (`start` is a unit that does not run).
        found.removed = [
            (c.host, c.unit)
            for c in changes
            if c.action != "start" and c.host not in found.unreachable
        ]
    if kind == "hosts":
        found.folders = [
            (h.name, deploy_dir(plan, h))
            for h in plan.spec.hosts
            if h.name not in found.unreachable
        ]
    return found


def confirm_down(plan: Plan, yes: bool) -> None:
    """On Kubernetes, `down` deletes objects shared by a team: ask first, unless --yes. With
    no terminal to ask on, refuse (exit 2) instead of deleting unasked."""
    if yes or plan.target != "kubernetes":
        return
    import typer

    from pdctl.errors import UsageError

    namespace = plan.spec.kubernetes.namespace
    if not sys.stdin.isatty():
        raise UsageError(
            f"down would delete the Kubernetes objects of {plan.name!r} in namespace "
            f"{namespace!r} and stdin is not a terminal to confirm on",
            fix="add --yes (see what it would delete: --dry-run)",
        )
    if not typer.confirm(
        f"delete the Kubernetes objects of {plan.name!r} in namespace {namespace!r}?",
        default=False,
    ):
        raise typer.Abort()
