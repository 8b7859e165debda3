"""`pdctl down --dry-run`: what `down` would stop and delete, found by connecting and reading
only (nothing is stopped, deleted or written); and the confirmation `down` asks on Kubernetes."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pdctl.plan.model import Plan
    from pdctl.render.bundle import Bundle
    from pdctl.targets.base import Connect


@dataclass
class Preview:
    """(where, what) `down` would stop or delete, (where, what) it would keep, and on hosts
    (host, folder) the deployment folders it would remove."""

    kind: str
    removed: list[tuple[str, str]] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)
    folders: list[tuple[str, str]] = field(default_factory=list)

    def lines(self) -> list[str]:
        verb = "delete" if self.kind == "kubernetes" else "stop"
        out = [f"would {verb} {what} ({where})" for where, what in self.removed]
        out += [
            f"would keep {what} ({where}); --delete-volumes removes it" for where, what in self.kept
        ]
        out += [f"would remove the folder {folder} on {host}" for host, folder in self.folders]
        if not self.removed:
            out.append("nothing runs: nothing to stop" if verb == "stop" else "nothing to delete")
        return out


def preview(plan: Plan, bundle: Bundle, options: Connect, delete_volumes: bool = False) -> Preview:
    """Connect and list what `down` would remove; changes nothing."""
    from pdctl.actions import kind_of
    from pdctl.render.host import deploy_dir
    from pdctl.targets import open_target

    kind = kind_of(plan, options)
    found = Preview(kind)
    with open_target(plan, bundle, options) as target:
        if kind == "kubernetes":
            from pdctl.targets.kube import KEPT_KINDS

            namespace = plan.spec.kubernetes.namespace
            for res, name in target.owned_objects():  # type: ignore[attr-defined]
                keep = (res.group, res.kind) in KEPT_KINDS and not delete_volumes
                (found.kept if keep else found.removed).append((namespace, f"{res.kind}/{name}"))
            return found
        # What runs there now: every unit observed (`start` is a unit that does not run).
        found.removed = [(c.host, c.unit) for c in target.changes() if c.action != "start"]
    if kind == "hosts":
        found.folders = [(h.name, deploy_dir(plan, h)) for h in plan.spec.hosts]
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
