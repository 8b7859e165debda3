"""`up`, `down`, `status` and `logs` over any Target, with one dry-run mode (as helm has it):

- `none`: connect, compute the changes, confirm, apply, wait until healthy;
- `server`: connect and compute the changes, apply nothing (`up --dry-run`);
- `client`: plan and render only, no connection (`up --dry-run --offline`).

Actions print nothing: they report through the `Progress` the CLI gives them.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from pdctl.errors import PdctlError
from pdctl.plan.model import Plan
from pdctl.render.bundle import Bundle
from pdctl.targets import open_target
from pdctl.targets.base import Connect, StatusRow, Stopped, Target, Write
from pdctl.targets.rollout import Outcome, UpFailed
from pdctl.targets.ssh import Unreachable
from pdctl.targets.state import Change

DryRun = Literal["none", "client", "server"]
OFFLINE_HINT = "show the plan without connecting: --dry-run --offline"


class Progress(Protocol):
    """What the CLI shows of an action: `say` a step, show `planned` changes (`compared`:
    against what runs, else straight from the bundle), `confirm` them, and wrap the apply
    (`applying`: a spinner, the Ctrl-C handling of an interruptible target)."""

    def say(self, message: str) -> None: ...

    def planned(self, kind: str, changes: list[Change], compared: bool) -> None: ...

    def confirm(self) -> bool: ...

    def applying(self, target: Target) -> AbstractContextManager[object]: ...


@dataclass
class Up:
    """What `up` did: the changes, whether it applied them, the outcome, the endpoints."""

    kind: str
    changes: list[Change]
    applied: bool = False
    outcome: Outcome = field(default_factory=Outcome)
    endpoints: list[str] = field(default_factory=list)

    @property
    def todo(self) -> list[Change]:
        return [c for c in self.changes if c.action != "keep"]


def kind_of(plan: Plan, options: Connect) -> str:
    if plan.target == "kubernetes":
        return "kubernetes"
    return "docker" if options.docker_urls else "hosts"


def bundle_changes(plan: Plan, bundle: Bundle, kind: str) -> list[Change]:
    """What the bundle starts, read without connecting (every unit or object is new)."""
    if kind == "kubernetes":
        return [
            Change(
                plan.spec.kubernetes.namespace,
                f"{o['kind']}/{o['metadata']['name']}",
                o["kind"],
                "start",
                "not compared (--offline)",
            )
            for o in bundle.objects
        ]
    from pdctl.targets.state import desired_units, diff

    return [
        replace(c, why="not compared (--offline)") for c in diff(desired_units(plan, bundle), [])
    ]


def up(
    plan: Plan,
    bundle: Bundle,
    options: Connect,
    progress: Progress,
    secrets: Callable[[], dict[str, str]],
    dry_run: DryRun = "none",
    yes: bool = False,
    timeout: float = 900.0,
    keep_going: bool = False,
) -> Up:
    """Bring the target in line with the bundle (`applied` false: a dry run,
    or not confirmed). Raises UpFailed when the run failed and was undone, PdctlError when
    a host cannot be reached; with keep_going the failures are in the outcome instead."""
    kind = kind_of(plan, options)
    if dry_run == "client":
        changes = bundle_changes(plan, bundle, kind)
        progress.planned(kind, changes, compared=False)
        return Up(kind, changes)
    # Secrets come from the caller's environment, read before anything connects; Kubernetes
    # objects reference Secrets by name, so pdctl sends no value there.
    values = secrets() if dry_run == "none" and kind != "kubernetes" else {}
    with open_target(plan, bundle, options, progress.say) as target:
        try:
            changes = target.changes()
        except Unreachable as exc:
            raise PdctlError(f"{exc.line()}; check the address, or {OFFLINE_HINT}") from None
        result = Up(kind, changes)
        progress.planned(kind, changes, compared=True)
        if dry_run == "server":
            return result
        # Nothing to change still applies: it waits until what runs is healthy (and prunes).
        if result.todo and not yes and not progress.confirm():
            return result
        with progress.applying(target):
            result.outcome = target.apply(changes, values, timeout, keep_going)
        result.applied = True
        result.endpoints = target.endpoints()
    return result


def down(
    plan: Plan, bundle: Bundle, options: Connect, progress: Progress, delete_volumes: bool = False
) -> Stopped:
    """Stop and remove what `up` started (twice is harmless); what could not be reached is
    in the answer, not raised."""
    with open_target(plan, bundle, options, progress.say) as target:
        return target.down(delete_volumes=delete_volumes)


def status(plan: Plan, bundle: Bundle, options: Connect) -> tuple[list[StatusRow], dict[str, str]]:
    """One row per instance, and the hosts that could not be reached (name -> why)."""
    with open_target(plan, bundle, options) as target:
        rows = target.status()
        return rows, dict(sorted(target.unreachable.items()))


def logs(
    plan: Plan,
    bundle: Bundle,
    options: Connect,
    unit: str | None,
    follow: bool,
    lines: int,
    write: Write,
) -> None:
    with open_target(plan, bundle, options) as target:
        target.logs(unit, follow, lines, write)


__all__ = ["DryRun", "Progress", "Up", "UpFailed", "down", "logs", "status", "up"]
