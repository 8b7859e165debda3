"""`pdctl status`: one row per instance: where, role, pid/container/pod, health, model."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import typer

from pdctl.cli.connect import ConnectFlags, connection
from pdctl.cli.options import FACTS, PHASE, SPEC, TARGET
from pdctl.cli.specfile import with_overlays


def register(app: typer.Typer) -> None:
    @app.command("status")
    @with_overlays
    @connection()
    def status(
        conn: ConnectFlags,
        spec: str = SPEC,
        output: str = typer.Option(
            "table", "--output", "-o", metavar="FORMAT", help="table or json."
        ),
        phase: int | None = PHASE,
        target: str | None = TARGET,
        facts: Path | None = FACTS,
    ) -> None:
        """Show every instance of SPEC and whether it is healthy."""
        from rich.table import Table

        from pdctl import actions
        from pdctl.cli import term
        from pdctl.cli.specfile import load
        from pdctl.cli.summary import status_counts, status_line
        from pdctl.errors import PdctlError, UsageError

        if output not in ("table", "json"):
            raise UsageError(f"--output must be table or json (got {output!r})")
        plan, bundle = load(spec, phase, target, facts)  # the GPUs `up --facts` chose
        found, unreachable = actions.status(plan, bundle, conn.target())
        rows = [asdict(r) for r in found]
        failed = None
        if unreachable:  # the rows say `unreachable`; the exit status and stderr say why
            failed = PdctlError("cannot reach " + "; ".join(unreachable.values()))
        if output == "json":
            gone = [{"host": h, "error": why} for h, why in unreachable.items()]
            doc = {"name": plan.name, "instances": rows, "unreachable": gone}
            typer.echo(json.dumps({**doc, "summary": status_counts(rows)}, indent=2))
            if failed:
                raise failed
            return
        table = Table(title=f"{plan.name} (phase {plan.phase}, {plan.target})")
        columns = ["host", "unit", "role", "pid", "state", "supervisor", "health", "model"]
        columns += ["endpoint", "why"]
        # A column nothing fills (a pod has no pid, Kubernetes no endpoint) is left out.
        columns = [
            c
            for c in columns
            if c in ("host", "unit", "role", "state")
            or any(row[c] not in ("", "-") for row in rows)
        ]
        for col in columns:
            table.add_column(col)
        for row in rows:
            table.add_row(*(str(row[c]) for c in columns))
        console = term.console()
        console.print(table)
        console.print(status_line(rows))
        bare = sorted({r["host"] for r in rows if r["supervisor"] == "nohup"})
        if bare:  # nothing restarts these: said once, under the table
            console.print(
                f"warning: units on {', '.join(bare)} run under nohup: nothing restarts one "
                "that dies (no systemd there, or supervise: none; see docs/phase0-hosts.md)"
            )
        if failed:
            raise failed
