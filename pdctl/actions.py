"""`up`, `diff`, `down`, `status` and `logs` over any Target, with one dry-run mode (as helm
has it):

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

from pdctl.errors import PdctlError, UsageError
from pdctl.plan.model import Plan
from pdctl.render.bundle import Bundle
from pdctl.targets import capabilities, open_target
from pdctl.targets.base import Capabilities, Connect, Stage, StatusRow, Stopped, Target, Write
from pdctl.targets.outcome import Outcome, UpFailed
from pdctl.targets.ssh import Unreachable
from pdctl.targets.state import ASKED, Change, group_cause

DryRun = Literal["none", "client", "server"]
OFFLINE_HINT = "show the plan without connecting: --dry-run --offline"


class Progress(Protocol):
    """What the CLI shows of an action: `say` a step, show `planned` changes (`compared`:
    against what runs, else straight from the bundle), `confirm` them, wrap the apply
    (`applying`: a live display, the Ctrl-C handling of an interruptible target), and show
    each instance's `stage` while the target waits for it."""

    def say(self, message: str) -> None: ...

    def planned(self, kind: str, changes: list[Change], compared: bool) -> None: ...

    def confirm(self) -> bool: ...

    def applying(self, target: Target) -> AbstractContextManager[object]: ...

    def stage(self, report: Stage) -> None:
        """Where one instance is while the target waits for it (only while applying)."""


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
    return capabilities_of(plan, options).kind


def capabilities_of(plan: Plan, options: Connect) -> Capabilities:
    """What the target of `plan` can do (pdctl.targets.base.Capabilities), without
    connecting: what the CLI asks before it offers or refuses an option."""
    return capabilities(plan, options)


def bundle_changes(plan: Plan, bundle: Bundle, kind: str) -> list[Change]:
    """What the bundle starts, read without connecting (every unit or object is new)."""
    if kind == "kubernetes":  # the bundle's objects (a hosts bundle has units)
        return [
            Change(
                plan.spec.kubernetes.namespace, f"{o['kind']}/{o['metadata']['name']}", o["kind"],
                "start", "not compared (--offline)",
            )
            for o in bundle.objects
        ]
    from pdctl.targets.state import desired_units, diff

    return [
        replace(c, why="not compared (--offline)") for c in diff(desired_units(plan, bundle), [])
    ]


def up(
    plan: Plan, bundle: Bundle, options: Connect, progress: Progress,
    secrets: Callable[[], dict[str, str]], dry_run: DryRun = "none", yes: bool = False,
    timeout: float = 900.0, keep_going: bool = False,
) -> Up:
    """Bring the target in line with the bundle (`applied` false: a dry run,
    or not confirmed). Raises UpFailed when the run failed and was undone, PdctlError when
    a host cannot be reached; with keep_going the failures are in the outcome instead."""
    caps = capabilities_of(plan, options)
    kind = caps.kind
    if dry_run == "client":
        changes = bundle_changes(plan, bundle, kind)
        progress.planned(kind, changes, compared=False)
        return Up(kind, changes)
    # Secrets come from the caller's environment, read before anything connects; Kubernetes
    # objects reference Secrets by name, so pdctl sends no value there.
    values = secrets() if dry_run == "none" and caps.sends_secrets else {}
    stage = progress.stage if dry_run == "none" else None
    with open_target(plan, bundle, options, progress.say, stage) as target:
        try:
            if dry_run == "server" and caps.server_dry_run:
                changes = target.diff()[0]  # the API server's dry run (dryRun=All)
            else:
                changes = target.changes(grace=timeout)
        except Unreachable as exc:
            raise PdctlError(f"{exc.line()}; check the address, or {OFFLINE_HINT}") from None
        result = Up(kind, changes)
        progress.planned(kind, changes, compared=True)
        if dry_run == "server":
            return result
        return confirm_and_apply(target, result, progress, values, yes, timeout, keep_going)


def confirm_and_apply(
    target: Target, result: Up, progress: Progress, values: dict[str, str], yes: bool,
    timeout: float, keep_going: bool = False,
) -> Up:
    """`up`'s and `restart`'s last step: the planned changes confirmed (unless `yes`), applied,
    waited on. Nothing to change asks nothing and still calls apply, which writes only what
    changed (nothing here) and waits until what runs is healthy. A drifted Kubernetes object
    is an update (pdctl.targets.kube.apply), so it is confirmed like any other change."""
    if result.todo and not yes and not progress.confirm():
        return result
    with progress.applying(target):
        result.outcome = target.apply(result.changes, values, timeout, keep_going)
    result.applied = True
    result.endpoints = target.endpoints()
    return result


def units_to_restart(
    plan: Plan, bundle: Bundle, units: list[str], role: str | None
) -> frozenset[str]:
    """The units `pdctl restart` names, and with `role` every unit of that role (the order is
    the rollout's); a unit or role the bundle does not have is a UsageError naming those it
    has."""
    known = [u.unit.name for u in bundle.units]
    unknown = [u for u in units if u not in known]
    if unknown:
        raise UsageError(
            f"{plan.name} has no unit {', '.join(unknown)}",
            fix=f"name units of `pdctl status`: {', '.join(known)}")
    if role is None:
        return frozenset(units)
    roles = list(dict.fromkeys(u.unit.role for u in bundle.units))
    if role not in roles:
        raise UsageError(f"{plan.name} has no unit of role {role!r}",
                         fix=f"choose one of {', '.join(roles)}")
    return frozenset(units) | {u.unit.name for u in bundle.units if u.unit.role == role}


def restart(
    plan: Plan, bundle: Bundle, options: Connect, progress: Progress, units: list[str],
    secrets: Callable[[], dict[str, str]], yes: bool = False, timeout: float = 900.0,
    role: str | None = None,
) -> Up:
    """Restart `units` of a deployment that runs as the bundle says, each with the scripts it
    runs, one at a time (a multi-node group as one), each waited on until healthy; a failure
    undoes the run as `up`'s does. Refused (nothing changed) when what runs differs from the
    bundle: `up` is what brings it in line. `units` and `role`: see `units_to_restart`."""
    caps = capabilities_of(plan, options)
    if not caps.restarts:
        raise UsageError(
            f"pdctl restart restarts units on SSH hosts and Docker engines, not on {caps.named}",
            fix=f"kubectl -n {plan.spec.kubernetes.namespace} rollout restart deployment/NAME "
            "(a LeaderWorkerSet restarts when its template changes: an annotation set with "
            "kubectl patch)")
    asked = units_to_restart(plan, bundle, units, role)
    values = secrets() if caps.sends_secrets else {}
    # What `restart` may change: the units asked for, and the other nodes of their groups.
    expected = {ASKED} | {group_cause(u) for u in asked}
    with open_target(plan, bundle, options, progress.say, progress.stage) as target:
        try:
            changes = target.changes(grace=timeout, restart=asked)
        except Unreachable as exc:
            raise PdctlError(f"{exc.line()}; check the address") from None
        off = [c for c in changes if c.action != "keep" and c.why not in expected]
        if off:
            listed = "; ".join(f"{c.unit} on {c.host}: {c.action} ({c.why})" for c in off[:4])
            more = f"; and {len(off) - 4} more" if len(off) > 4 else ""
            raise PdctlError(
                f"what runs of {plan.name!r} is not what the spec says ({listed}{more}); "
                "nothing was restarted: `pdctl up` brings it in line (and restarts what "
                "changed)" + ("" if plan.bundled or plan.on_kubernetes else
                             "; one started with `up --bundle DIR` takes --bundle DIR here too"))
        progress.planned(caps.kind, changes, compared=True)
        return confirm_and_apply(target, Up(caps.kind, changes), progress, values, yes, timeout)


@dataclass
class Diff:
    """What `diff` found: one Change per unit or object, and per changed one its unified
    diff (key: `host/unit` on hosts, `Kind/name` on Kubernetes; absent: no text to show)."""

    kind: str
    changes: list[Change]
    texts: dict[str, str] = field(default_factory=dict)

    @property
    def todo(self) -> list[Change]:
        return [c for c in self.changes if c.action != "keep"]


def diff(plan: Plan, bundle: Bundle, options: Connect, progress: Progress) -> Diff:
    """Compare the bundle with what runs, changing nothing: on Kubernetes a server-side dry
    run of every object against its live version (and what prune would delete); on hosts the
    changes `up` would make, with the differing files of each unit it would replace."""
    kind = kind_of(plan, options)
    with open_target(plan, bundle, options, progress.say) as target:
        try:
            changes, texts = target.diff()
        except Unreachable as exc:
            raise PdctlError(f"{exc.line()}; check the address") from None
        return Diff(kind, changes, texts)


def down(
    plan: Plan, bundle: Bundle, options: Connect, progress: Progress, delete_volumes: bool = False,
    timeout: float | None = None,
) -> Stopped:
    """Stop and remove what `up` started (twice is harmless); what could not be reached is
    in the answer, not raised. Where the target waits for its instances to go
    (`capabilities.down_timeout`, Kubernetes: the pods), up to `timeout` seconds, reporting
    each one's stage (`terminating`) through the progress."""
    with open_target(plan, bundle, options, progress.say, progress.stage) as target:
        return target.down(delete_volumes=delete_volumes, timeout=timeout)


def down_plan(
    plan: Plan, bundle: Bundle, options: Connect, delete_volumes: bool = False
) -> Stopped:
    """What `down` would stop, delete and keep, found by connecting and reading only (the
    hosts it could not reach are in the answer, as `down` records them)."""
    with open_target(plan, bundle, options) as target:
        return target.down_plan(delete_volumes)


def status(plan: Plan, bundle: Bundle, options: Connect) -> tuple[list[StatusRow], dict[str, str]]:
    """One row per instance, and the hosts that could not be reached (name -> why)."""
    with open_target(plan, bundle, options) as target:
        rows = target.status()
        return rows, dict(sorted(target.unreachable.items()))


def logs(
    plan: Plan, bundle: Bundle, options: Connect, unit: str | None, follow: bool, lines: int,
    write: Write,
) -> None:
    with open_target(plan, bundle, options) as target:
        target.logs(unit, follow, lines, write)


__all__ = [
    "Diff", "DryRun", "Progress", "Up", "UpFailed", "capabilities_of", "diff", "down", "down_plan",
    "logs", "restart", "status", "up",
]
