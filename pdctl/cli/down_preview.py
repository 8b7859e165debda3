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

import typer

from pdctl.actions import down_plan, kind_of
from pdctl.errors import PdctlError, UsageError

if TYPE_CHECKING:
    from pdctl.plan.model import Plan
    from pdctl.render.bundle import Bundle
    from pdctl.targets.base import Capabilities, Connect


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
    # host -> (folder, KiB held or ""): the files `up --bundle` copied (Stopped.bundles)
    bundles: dict[str, tuple[str, str]] = field(default_factory=dict)
    delete: bool = False  # --delete-volumes (Kubernetes) / --delete-bundle (hosts)

    def lines(self) -> Iterator[str]:
        """The preview, a line at a time; after the last one, when a host could not be
        reached, the PdctlError (exit 1) that names it."""
        verb = "delete" if self.kind == "kubernetes" else "stop"  # objects, or instances
        yield from (f"would {verb} {what} ({where})" for where, what in self.removed)
        for where, what in self.kept:
            yield f"would keep {what} ({where}); --delete-volumes removes it"
        yield from (f"would remove the folder {folder} on {host}" for host, folder in self.folders)
        for host, (folder, kib) in self.bundles.items():
            size = f"{held_size(kib)}, the files `up --bundle` copied"
            yield (f"would remove the folder {folder} on {host} ({size})" if self.delete else
                   f"would keep {folder} on {host} ({size}); --delete-bundle removes it")
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
                "runs on the other hosts and leave these; run it again when the host answers")


def held_size(kib: str) -> str:
    """A bundle folder's size as `down` reports it (Stopped.bundles: KiB, "" when unknown)."""
    return f"{int(kib) * 1024 / 1e6:.1f} MB" if kib.isdigit() else "size unknown"


def preview(plan: Plan, bundle: Bundle, options: Connect, delete_volumes: bool = False) -> Preview:
    """Connect and list what `down` would remove (actions.down_plan); changes nothing. SSH
    hosts that cannot be reached (or are lost meanwhile) are recorded, as `down` records
    them."""
    plan_ = down_plan(plan, bundle, options, delete_volumes)
    return Preview(
        kind_of(plan, options), removed=plan_.removed, kept=plan_.kept,
        folders=list(plan_.folders.items()), unreachable=plan_.unreachable, left=plan_.left,
        bundles=plan_.bundles, delete=delete_volumes)


def confirm_down(plan: Plan, caps: Capabilities, yes: bool) -> None:
    """Where `down` deletes objects shared by a team (`caps.confirm_down`: Kubernetes), ask
    first, unless --yes. With no terminal to ask on, refuse (exit 2) instead of deleting
    unasked."""
    if yes or not caps.confirm_down:
        return
    namespace = plan.spec.kubernetes.namespace
    if not sys.stdin.isatty():
        raise UsageError(f"down would delete the Kubernetes objects of {plan.name!r} in namespace "
                         f"{namespace!r} and stdin is not a terminal to confirm on",
                         fix="add --yes (see what it would delete: --dry-run)")
    if not typer.confirm(
        f"delete the Kubernetes objects of {plan.name!r} in namespace {namespace!r}?",
        default=False,
    ):
        raise typer.Abort()
