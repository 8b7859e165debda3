"""`pdctl logs SPEC [UNIT] [-f]`: an instance's log (remote file, container or pod)."""

from __future__ import annotations

import sys

import typer

from pdctl import actions
from pdctl.cli.connect import ConnectFlags, connection
from pdctl.cli.options import DEPLOYED_PHASE, SPEC, TARGET
from pdctl.cli.specfile import load, with_overlays
from pdctl.errors import PdctlError

WORKLOADS = ("Deployment", "StatefulSet", "LeaderWorkerSet", "DaemonSet")


def unit_names(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of UNIT: the units SPEC plans (on Kubernetes its workloads, whose names
    start their pods' names). Reads and plans the spec only: nothing connects, and a spec that
    does not load completes nothing."""
    spec = ctx.params.get("spec")
    if not spec or spec == "-":
        return []
    try:
        plan, bundle = load(spec, ctx.params.get("phase"), ctx.params.get("target"))
    except (PdctlError, OSError, ValueError):
        return []
    if plan.on_kubernetes:
        names = [o["metadata"]["name"] for o in bundle.objects if o.get("kind") in WORKLOADS]
    else:
        names = [u.name for u in plan.units]
    return [n for n in names if n.startswith(incomplete)]


@with_overlays
@connection()
def logs(
    conn: ConnectFlags, spec: str = SPEC,
    unit: str | None = typer.Argument(
        None, help="Instance (unit, or the start of a pod's name).", autocompletion=unit_names),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
    lines: int = typer.Option(100, "--lines", "-n", min=0, help="How many lines from the end."),
    phase: int | None = DEPLOYED_PHASE, target: str | None = TARGET,
) -> None:
    """Print the log of UNIT (every unit's last lines when UNIT is left out)."""
    plan, bundle = load(spec, phase, target)
    actions.logs(plan, bundle, conn.target(), unit, follow, lines, sys.stdout.write)
