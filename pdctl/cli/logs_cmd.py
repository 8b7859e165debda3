"""`pdctl logs SPEC [UNIT] [-f]`: an instance's log (remote file, container or pod)."""

from __future__ import annotations

import sys

import typer

from pdctl.cli.connect import ConnectFlags, connection
from pdctl.cli.options import PHASE, SPEC, TARGET


def register(app: typer.Typer) -> None:
    @app.command("logs")
    @connection()
    def logs(
        conn: ConnectFlags,
        spec: str = SPEC,
        unit: str | None = typer.Argument(None, help="Instance (unit or pod) name."),
        follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
        lines: int = typer.Option(100, "--lines", "-n", help="How many lines from the end."),
        phase: int | None = PHASE,
        target: str | None = TARGET,
    ) -> None:
        """Print the log of UNIT (every unit's last lines when UNIT is left out)."""
        from pdctl import actions
        from pdctl.cli.specfile import load

        plan, bundle = load(spec, phase, target)
        actions.logs(plan, bundle, conn.target(), unit, follow, lines, sys.stdout.write)
