"""`pdctl restart`: restart named units of a running deployment, each waited on until healthy."""

from __future__ import annotations

from pathlib import Path

import typer

from pdctl import actions
from pdctl.cli import term
from pdctl.cli.connect import ConnectFlags, connection
from pdctl.cli.options import DEPLOYED_BUNDLE, DEPLOYED_PHASE, FACTS, SPEC, TARGET
from pdctl.cli.progress import ConsoleProgress, failed_run
from pdctl.cli.secret_values import read_secrets
from pdctl.cli.specfile import load, with_overlays
from pdctl.errors import UsageError


@with_overlays
@connection()
def restart(
    conn: ConnectFlags, spec: str = SPEC,
    units: list[str] = typer.Argument(
        None, metavar="UNIT", show_default=False,
        help="Units to restart, as `pdctl status` names them."),
    role: str | None = typer.Option(
        None, "--role", metavar="ROLE",
        help="Restart every unit of ROLE (prefill, decode, serve, router ...), one at a time."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    timeout: int = typer.Option(
        900, "--timeout", min=1, help="Seconds each restarted unit may take to become healthy."),
    phase: int | None = DEPLOYED_PHASE, target: str | None = TARGET, facts: Path | None = FACTS,
    wheels: Path | None = DEPLOYED_BUNDLE,
) -> None:
    """Restart UNITs (or every unit of --role) of SPEC's running deployment (SSH hosts, Docker
    engines).

    On SSH hosts each unit restarts with the scripts it runs, one at a time, and pdctl waits
    until it is healthy before the next; one that does not come back fails the run, which is
    undone as `up`'s is. On Docker engines their containers are recreated and waited on
    together. A node of a multi-node group restarts its whole group. Refused, with nothing
    restarted, when what runs is not what SPEC says (`pdctl up` brings it in line). For an
    engine that answers its health check but serves nothing, e.g. a decode whose requests
    wait for KV that never comes (`pdctl top`: kv-transfer-stalled)."""
    if not units and role is None:
        raise UsageError("name the units to restart", fix="give UNIT... or --role ROLE")
    console = term.console(log_path=False)
    plan, bundle = load(spec, phase, target, facts, wheels)
    try:
        done = actions.restart(plan, bundle, conn.target(), ConsoleProgress(console), units or [],
                               lambda: read_secrets(plan), yes, timeout, role)
    except actions.UpFailed as exc:
        raise failed_run(console, exc, "restart") from None
    if done.applied:
        restarted = [c.unit for c in done.changes if c.action == "restart"]
        console.print(f"[bold]restarted[/] {', '.join(restarted)}: healthy.")
